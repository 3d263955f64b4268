package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// newTestLease acquires name on a fresh memory backend, without keep-alive.
func newTestLease(t *testing.T, ttl time.Duration) (*lock.Lease, *memory.Backend) {
	t.Helper()
	mem := memory.NewBackend()
	lease, err := lock.New(mem, nil).TryAcquire(context.Background(), "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return lease, mem
}

var errParentGone = errors.New("parent's own cause")

type ctxKey struct{}

func TestWithLeaseEndsWithTheParentFirst(t *testing.T) {
	lease, _ := newTestLease(t, time.Minute)
	parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
	ctx, cancel := lock.WithLease(parent, lease)
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("ended before either did")
	}
	if ctx.Value(ctxKey{}) != "v" {
		t.Fatal("the parent's values are not carried")
	}
	cancelParent(errParentGone)
	await(t, ctx.Done(), "the context after the parent ended")
	_ = lease.Release(context.Background())
	if cause := context.Cause(ctx); !errors.Is(cause, errParentGone) {
		t.Fatalf("cause %v; want the parent's cause, which came first", cause)
	}
}

func TestWithLeaseEndsWithTheReleaseFirst(t *testing.T) {
	lease, _ := newTestLease(t, time.Minute)
	parent, cancelParent := context.WithCancelCause(context.Background())
	ctx, cancel := lock.WithLease(parent, lease)
	defer cancel()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	await(t, ctx.Done(), "the context after the release")
	cancelParent(errParentGone)
	if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrReleased) {
		t.Fatalf("cause %v; want ErrReleased, which came first", cause)
	}
	if parent.Err() == nil {
		t.Fatal("the parent ended with the lease")
	}
}

func TestWithLeaseEndsWithTheLoss(t *testing.T) {
	lease, mem := newTestLease(t, time.Minute)
	ctx, cancel := lock.WithLease(context.Background(), lease)
	defer cancel()
	mem.Expire("job")
	_ = lease.Extend(context.Background(), time.Minute) // the backend says: not held
	await(t, ctx.Done(), "the context after the loss")
	if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrLost) || !errors.Is(cause, lock.ErrNotHeld) {
		t.Fatalf("cause %v; want the loss (ErrLost, ErrNotHeld)", cause)
	}
}

func TestWithLeaseEndsAtTheLocalDeadline(t *testing.T) {
	lease, _ := newTestLease(t, 200*time.Millisecond)
	ctx, cancel := lock.WithLease(context.Background(), lease)
	defer cancel()
	await(t, ctx.Done(), "the context after the local deadline")
	if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrLost) {
		t.Fatalf("cause %v; want ErrLost", cause)
	}
}

func TestWithLeaseCancel(t *testing.T) {
	lease, _ := newTestLease(t, time.Minute)
	ctx, cancel := lock.WithLease(context.Background(), lease)
	cancel()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
		t.Fatalf("cause %v; want context.Canceled", cause)
	}
	if lease.Err() != nil {
		t.Fatalf("cancel ended the lease: %v", lease.Err())
	}
}

func TestWithLeaseOnAnEndedLeaseOrParent(t *testing.T) {
	lease, _ := newTestLease(t, time.Minute)
	_ = lease.Release(context.Background())
	ctx, cancel := lock.WithLease(context.Background(), lease)
	defer cancel()
	await(t, ctx.Done(), "a context over a released lease")
	if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrReleased) {
		t.Fatalf("cause %v; want ErrReleased", cause)
	}

	live, _ := newTestLease(t, time.Minute)
	parent, cancelParent := context.WithCancelCause(context.Background())
	cancelParent(errParentGone)
	ctx, cancel = lock.WithLease(parent, live)
	defer cancel()
	if cause := context.Cause(ctx); !errors.Is(cause, errParentGone) {
		t.Fatalf("cause %v; want the ended parent's", cause)
	}
}

func TestWithLeaseRefusesNilArguments(t *testing.T) {
	lease, _ := newTestLease(t, time.Minute)
	for name, call := range map[string]func() (context.Context, context.CancelFunc){
		"nil lease":  func() (context.Context, context.CancelFunc) { return lock.WithLease(context.Background(), nil) },
		"nil parent": func() (context.Context, context.CancelFunc) { return lock.WithLease(nil, lease) }, //nolint:staticcheck // the point
	} {
		ctx, cancel := call()
		if cause := context.Cause(ctx); ctx.Err() == nil || !errors.Is(cause, lock.ErrInvalid) {
			t.Errorf("%s: err %v, cause %v; want a context already ended with ErrInvalid", name, ctx.Err(), cause)
		}
		cancel()
	}
}
