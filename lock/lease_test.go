package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

func TestExtendReplyAfterTheLossIsNotASuccess(t *testing.T) {
	s := newStuckBackend(t, memory.NewBackend())
	s.stuckExtend.Store(true)
	s.extendReply = func() error { return nil } // the server did renew, too late
	rec := &recorder{}
	l, err := lock.New(s, &lock.Options{Observer: rec.observer()}).TryAcquire(context.Background(), "job", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	extended := run(func() error { return l.Extend(context.Background(), time.Minute) })
	await(t, s.entered, "renewal sent")
	await(t, l.Done(), "loss at the local deadline")
	s.unstick()
	err = await(t, extended, "Extend")
	if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend answered after the loss: %v; want ErrNotHeld and ErrLost", err)
	}
	if n := len(rec.of("extended")); n != 0 {
		t.Fatalf("%d Extended events after the loss; want 0", n)
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", l.Err())
	}
}

func TestRetriedReleaseAfterTheDeadlineReportsTheLoss(t *testing.T) {
	mem := memory.NewBackend()
	var fail atomic.Bool
	fail.Store(true)
	f := &faultyBackend{Backend: mem, releaseErr: func() error {
		if fail.Load() {
			return errNetwork // the release did not land
		}
		return nil
	}}
	rec := &recorder{}
	l, err := lock.New(f, &lock.Options{Observer: rec.observer()}).TryAcquire(context.Background(), "job", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, errNetwork) {
		t.Fatalf("Release: %v; want the network error", err)
	}
	await(t, l.Done(), "loss at the local deadline")
	mem.Expire("job") // the lease ran out on the server: it was never released
	fail.Store(false)
	err = l.Release(context.Background())
	if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("retried Release after the deadline: %v; want ErrNotHeld and ErrLost, not a release", err)
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", l.Err())
	}
	if n := len(rec.of("released")); n != 0 {
		t.Fatalf("%d Released events for a lease that expired", n)
	}
}

func TestObserverMayCallTheLeaseFromTheKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trigger string
		prepare func(mem *memory.Backend)
	}{
		// The keep-alive's renewal succeeds; the Observer releases.
		{"Release on Extended", "extended", func(*memory.Backend) {}},
		// The keep-alive's renewal is refused: lost; the Observer cleans up.
		{"Release on Lost", "lost", func(mem *memory.Backend) { mem.Expire("job") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewBackend()
			var lease atomic.Pointer[lock.Lease]
			released := make(chan error, 1)
			var fired atomic.Bool
			rec := &recorder{}
			c := lock.New(mem, &lock.Options{KeepAlive: true, Observer: observeAll(func(kind string, e lock.Event) {
				rec.observe(kind, e)
				if kind == tc.trigger && fired.CompareAndSwap(false, true) {
					ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
					defer cancel()
					released <- lease.Load().Release(ctx)
				}
			})})
			l, err := c.TryAcquire(context.Background(), "job", 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			lease.Store(l)
			tc.prepare(mem)
			err = await(t, released, "Release called from the Observer")
			if tc.trigger == "extended" && err != nil {
				t.Fatalf("Release from the Observer: %v", err)
			}
			expectFree(t, mem, "job")
			await(t, l.Done(), "lease ended")
			// The event the inner Release raised arrives after the
			// callback being run returns (so possibly after Done closed),
			// not in the middle of it: the lease's end comes last.
			eventually(t, "the lease's end delivered", func() bool {
				kinds := rec.kinds()
				last := kinds[len(kinds)-1]
				return last == "released" || last == "lost"
			})
			if n := len(rec.of("released")) + len(rec.of("lost")); n != 1 {
				t.Fatalf("events %v; want exactly one end", rec.kinds())
			}
		})
	}
}

func TestRenewalFailureIsReported(t *testing.T) {
	var failures atomic.Int64
	f := &faultyBackend{Backend: memory.NewBackend(), extendErr: func() error {
		if failures.Add(1) == 1 {
			return errNetwork
		}
		return nil
	}}
	rec := &recorder{}
	l, err := lock.New(f, &lock.Options{KeepAlive: true, Observer: rec.observer()}).TryAcquire(context.Background(), "job", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	eventually(t, "a renewal after the failed one", func() bool { return len(rec.of("extended")) > 0 })
	failed := rec.of("renewal-failed")
	if len(failed) != 1 || !errors.Is(failed[0].Err, errNetwork) || failed[0].Token != l.Token() {
		t.Fatalf("renewal-failed events %+v; want one with the network error", failed)
	}
	if l.Err() != nil {
		t.Fatalf("lease ended: %v", l.Err())
	}
}

func TestReleaseReturnsAtItsContextDeadline(t *testing.T) {
	mem := memory.NewBackend()
	s := newStuckBackend(t, mem)
	s.stuckRelease.Store(true)
	l, err := lock.New(s, nil).TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = await(t, run(func() error { return l.Release(ctx) }), "Release with a backend that ignores its context")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release: %v; want DeadlineExceeded", err)
	}
	if l.Err() != nil {
		t.Fatalf("Err = %v; the outcome is unknown, the lease must stay as it was", l.Err())
	}
	// Once the backend answers, a retry settles it.
	s.stuckRelease.Store(false)
	s.unstick()
	await(t, s.returned, "the stuck release's late return")
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("retried Release: %v", err)
	}
	expectFree(t, mem, "job")
}

func TestExtendReturnsAtItsContextDeadlineAndDiscardsTheLateReply(t *testing.T) {
	s := newStuckBackend(t, memory.NewBackend())
	s.stuckExtend.Store(true)
	rec := &recorder{}
	l, err := lock.New(s, &lock.Options{Observer: rec.observer()}).TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	before := l.Deadline()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = await(t, run(func() error { return l.Extend(ctx, 2*time.Minute) }), "Extend with a backend that ignores its context")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend: %v; want DeadlineExceeded", err)
	}
	s.unstick()
	await(t, s.returned, "the stuck renewal's late (successful) return")
	if n := len(rec.of("extended")); n != 0 {
		t.Fatalf("%d Extended events for a renewal whose reply came after Extend returned", n)
	}
	if !l.Deadline().Equal(before) {
		t.Fatalf("the late reply moved the deadline by %v", l.Deadline().Sub(before))
	}
	if failed := rec.of("renewal-failed"); len(failed) != 1 || !errors.Is(failed[0].Err, context.DeadlineExceeded) {
		t.Fatalf("renewal-failed events %+v; want one with DeadlineExceeded", failed)
	}
}

func TestStoppingTheKeepAliveDoesNotWaitForAStuckRenewal(t *testing.T) {
	mem := memory.NewBackend()
	s := newStuckBackend(t, mem)
	s.stuckExtend.Store(true)
	// A short TTL, so that the first renewal comes soon.
	l, err := lock.New(s, &lock.Options{KeepAlive: true}).TryAcquire(context.Background(), "job", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	await(t, s.entered, "the keep-alive's renewal")
	if err := await(t, run(func() error { return l.Release(context.Background()) }), "Release while a renewal is stuck"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	expectFree(t, mem, "job")
}
