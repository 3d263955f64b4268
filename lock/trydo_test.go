package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

func TestTryDoRunsFnOnAFreeLock(t *testing.T) {
	mem := memory.NewBackend()
	f := &faultyBackend{Backend: mem}
	errFn := errors.New("fn failed")
	var token uint64
	err := lock.New(f, nil).TryDo(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
		if ctx.Err() != nil {
			t.Error("fn's context already ended")
		}
		token = uint64(l.Token())
		return errFn
	})
	if !errors.Is(err, errFn) || errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryDo: %v; want fn's error alone", err)
	}
	if token == 0 {
		t.Fatal("fn did not run with a lease")
	}
	if n := f.attempts.Load(); n != 1 {
		t.Fatalf("%d attempts; want 1", n)
	}
	expectFree(t, mem, "job")
}

func TestTryDoKeepsTheLeaseAlive(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	c := lock.New(f, &lock.Options{KeepAliveInterval: keepAliveFast}) // KeepAlive off: TryDo renews anyway
	err := c.TryDo(context.Background(), "job", time.Minute, func(ctx context.Context, _ *lock.Lease) error {
		eventually(t, "renewals while fn runs", func() bool { return f.extends.Load() >= 2 })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTryDoOnAHeldLockDoesNotRunFn(t *testing.T) {
	mem := memory.NewBackend()
	heldBy(t, mem, "job")
	f := &faultyBackend{Backend: mem}
	c := lock.New(f, &lock.Options{MaxAttempts: 5, MinBackoff: time.Millisecond})
	ran := false
	err := c.TryDo(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error {
		ran = true
		return nil
	}, lock.WithMaxAttempts(4)) // a Try call makes one attempt whatever it says
	if !errors.Is(err, lock.ErrHeld) || !errors.Is(err, lock.ErrNotAcquired) || ran {
		t.Fatalf("TryDo: %v, fn ran %v; want ErrHeld and ErrNotAcquired, fn not run", err, ran)
	}
	var held *driver.HeldError
	if !errors.As(err, &held) || held.TTL <= 0 {
		t.Fatalf("TryDo: %v; want the holder's remaining TTL", err)
	}
	if n := f.attempts.Load(); n != 1 {
		t.Fatalf("%d attempts; want exactly 1", n)
	}
	if n := f.releases.Load(); n != 0 {
		t.Fatalf("%d releases sent for a lock never taken; want 0", n)
	}
}

func TestTryAcquireMakesOneAttemptWhateverWithMaxAttemptsSays(t *testing.T) {
	mem := memory.NewBackend()
	heldBy(t, mem, "job")
	f := &faultyBackend{Backend: mem}
	_, err := lock.New(f, nil).TryAcquire(context.Background(), "job", time.Minute, lock.WithMaxAttempts(3))
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryAcquire: %v; want ErrHeld", err)
	}
	if n := f.attempts.Load(); n != 1 {
		t.Fatalf("%d attempts; want 1", n)
	}
}

func TestTryDoReleasesWhenFnPanics(t *testing.T) {
	mem := memory.NewBackend()
	var fnCtx context.Context
	var lease *lock.Lease
	recovered := func() (v any) {
		defer func() { v = recover() }()
		_ = lock.New(mem, nil).TryDo(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
			fnCtx, lease = ctx, l
			panic("boom")
		})
		return nil
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v; want TryDo to re-panic fn's panic", recovered)
	}
	expectFree(t, mem, "job")
	if fnCtx.Err() == nil || !errors.Is(lease.Err(), lock.ErrReleased) {
		t.Fatalf("fn's context %v, lease %v; want both ended, the lease released", fnCtx.Err(), lease.Err())
	}
}

func TestTryDoReportsTheLoss(t *testing.T) {
	mem := memory.NewBackend()
	errFn := errors.New("fn failed")
	err := lock.New(mem, nil).TryDo(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
		mem.Expire("job")
		_ = l.Extend(ctx, time.Minute) // the backend says: not held
		<-ctx.Done()
		return errFn
	})
	if !errors.Is(err, errFn) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("TryDo: %v; want fn's error and the loss, as Do", err)
	}
}

func TestTryDoRefusesANilFunction(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	if err := lock.New(f, nil).TryDo(context.Background(), "job", time.Minute, nil); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("TryDo(nil fn): %v; want ErrInvalid", err)
	}
	var nilClient *lock.Client
	if err := nilClient.TryDo(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error { return nil }); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("nil client: %v; want ErrInvalid", err)
	}
	if n := f.attempts.Load(); n != 0 {
		t.Fatalf("%d attempts; want none", n)
	}
}
