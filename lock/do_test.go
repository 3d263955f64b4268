package lock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// expectFree fails the test unless the backend holds nobody for name.
func expectFree(t *testing.T, b driver.Backend, name string) {
	t.Helper()
	info, err := inspectLock(context.Background(), b, name)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held {
		t.Fatalf("lock %q still held by %q (token %d)", name, info.Owner, info.Token)
	}
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	var fnCtx context.Context
	var lease *lock.Lease
	recovered := func() (v any) {
		defer func() { v = recover() }()
		_ = c.Do(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
			fnCtx, lease = ctx, l
			panic("boom")
		})
		return nil
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v; want Do to re-panic fn's panic \"boom\"", recovered)
	}
	expectFree(t, mem, "job")
	if fnCtx.Err() == nil {
		t.Fatal("fn's context not cancelled after the panic")
	}
	if !errors.Is(lease.Err(), lock.ErrReleased) {
		t.Fatalf("lease Err = %v; want ErrReleased", lease.Err())
	}
}

func TestDoReleasesWhenFnCallsGoexit(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	var fnCtx context.Context
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = c.Do(context.Background(), "job", time.Minute, func(ctx context.Context, _ *lock.Lease) error {
			fnCtx = ctx
			runtime.Goexit()
			return nil
		})
		t.Error("Do returned after fn called runtime.Goexit")
	}()
	await(t, exited, "goroutine exit")
	expectFree(t, mem, "job")
	if fnCtx.Err() == nil {
		t.Fatal("fn's context not cancelled after Goexit")
	}
}

func TestDoReturnsNilWhenFnReleasesTheLease(t *testing.T) {
	mem := memory.NewBackend()
	err := lock.New(mem, nil).Do(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
		return l.Release(ctx)
	})
	if err != nil {
		t.Fatalf("Do: %v; want nil when fn released the lease itself and succeeded", err)
	}
	expectFree(t, mem, "job")
}

func TestDoReportsALossReturnedByFnOnce(t *testing.T) {
	mem := memory.NewBackend()
	var lease *lock.Lease
	err := lock.New(mem, nil).Do(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
		lease = l
		mem.Expire("job")
		_ = l.Extend(ctx, time.Minute) // the backend says: not held
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, lock.ErrLost) || !errors.Is(err, lease.Err()) {
		t.Fatalf("Do: %v; want the loss", err)
	}
	if n := strings.Count(err.Error(), lock.ErrLost.Error()); n != 1 {
		t.Fatalf("Do: %q reports the loss %d times; want once", err, n)
	}
}

func TestDoRetriesAReleaseWhoseReplyWasLost(t *testing.T) {
	mem := memory.NewBackend()
	var lostReply atomic.Bool
	lostReply.Store(true)
	f := &faultyBackend{Backend: mem}
	b := &lostReplyRelease{faultyBackend: f, lost: &lostReply, once: true}
	err := lock.New(b, nil).Do(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error { return nil })
	if err != nil {
		t.Fatalf("Do: %v; want nil: the retried release settles the lost reply", err)
	}
	if n := f.releases.Load(); n != 2 {
		t.Fatalf("%d releases sent; want 2 (one retry)", n)
	}
	expectFree(t, mem, "job")
}

func TestDoReturnsWhenTheBackendIgnoresItsContext(t *testing.T) {
	mem := memory.NewBackend()
	s := newStuckBackend(t, mem)
	s.stuckRelease.Store(true)
	const ttl = 300 * time.Millisecond
	done := run(func() error {
		return lock.New(s, nil).Do(context.Background(), "job", ttl, func(context.Context, *lock.Lease) error { return nil })
	})
	err := await(t, done, "Do with a release that never answers")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v; want the release's unknown outcome (DeadlineExceeded)", err)
	}
}

func TestDoFailsFastOnAPermanentAcquireError(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error { return errPermanent }}
	ran := false
	done := run(func() error {
		return lock.New(f, &lock.Options{Queue: polling}).Do(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error {
			ran = true
			return nil
		})
	})
	err := await(t, done, "Do with a permanent acquire error under context.Background")
	if !errors.Is(err, errPermanent) || !errors.Is(err, lock.ErrNotAcquired) || ran {
		t.Fatalf("Do: %v, fn ran %v; want ErrNotAcquired with the cause, fn not run", err, ran)
	}
	if n := f.attempts.Load(); n != 1 {
		t.Fatalf("%d attempts; want 1", n)
	}
}
