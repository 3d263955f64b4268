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

// The deadline timer is what ends a lease that nobody renews in time: at the
// local deadline (the TTL minus the drift margin, counted from before the
// acquire request), not at the server's expiry, and whether or not a
// keep-alive is running.

func TestLeaseWithoutKeepAliveIsLostAtItsLocalDeadlineNotTheServers(t *testing.T) {
	// A drift margin of half the TTL puts the local deadline half a second
	// before the server's expiry: room for a slow timer on a loaded
	// machine.
	const ttl = time.Second
	c := lock.New(memory.NewBackend(), &lock.Options{DriftMin: ttl / 2})
	start := time.Now() // before the request, so before the server's lease began
	l, err := c.TryAcquire(context.Background(), "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	// Taken while the lease is live, and nothing else looks at the lease
	// (no keep-alive, no Err): only the deadline timer can close it.
	done := l.Done()
	deadline := l.Deadline()
	if !deadline.Before(start.Add(ttl)) {
		t.Fatalf("local deadline %v after the start; want before the TTL %v", deadline.Sub(start), ttl)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("Done still open %v after the acquire began (local deadline after %v)", waitLimit, deadline.Sub(start))
	}
	closed := time.Now()
	if elapsed := closed.Sub(start); elapsed >= ttl {
		t.Fatalf("Done closed %v after the acquire began: not before the server's expiry (TTL %v), although the local deadline came after %v", elapsed, ttl, deadline.Sub(start))
	}
	if closed.Before(deadline) {
		t.Errorf("Done closed %v before the local deadline", deadline.Sub(closed))
	}
	if err := l.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err after Done closed = %v; want ErrLost", err)
	}
}

func TestKeepAliveWhoseRenewalsKeepFailingLosesTheLeaseAtItsDeadline(t *testing.T) {
	const (
		ttl = 2 * time.Second
		// How late after the local deadline Done may close: the timer's
		// latency on a loaded machine. A keep-alive left to notice the
		// deadline by itself comes about 325ms late here.
		slack = 150 * time.Millisecond
	)
	var lease atomic.Pointer[lock.Lease]
	f := &faultyBackend{Backend: memory.NewBackend()}
	// Every renewal fails transiently, as a request that times out does:
	// it hangs until shortly before the lease's deadline, then gives up.
	f.extendErr = func() error {
		if l := lease.Load(); l != nil {
			if wait := time.Until(l.Deadline()) - 50*time.Millisecond; wait > 0 {
				time.Sleep(wait) // the slow request, not synchronisation
			}
		}
		return errNetwork
	}
	// The first renewal comes at 75% of the TTL (1.5s, half a second
	// before the deadline) and fails 50ms before the deadline; the
	// keep-alive retries a quarter of its interval (375ms) later, after the
	// deadline. Only the deadline timer ends the lease on time.
	c := lock.New(f, &lock.Options{KeepAlive: true, KeepAliveInterval: 0.75})
	l, err := c.TryAcquire(context.Background(), "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	lease.Store(l)
	done := l.Done()
	deadline := l.Deadline()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("a lease whose renewals all failed was still live %v after the acquire (%d renewals tried)", waitLimit, f.extends.Load())
	}
	if late := time.Since(deadline); late > slack {
		t.Fatalf("Done closed %v after the local deadline (%d renewals tried); want within %v", late, f.extends.Load(), slack)
	}
	if err := l.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", err)
	}
}

func TestLeaseWhoseReleaseFailedIsStillLostAtItsDeadline(t *testing.T) {
	const ttl = 300 * time.Millisecond
	f := &faultyBackend{Backend: memory.NewBackend(), releaseErr: func() error { return errNetwork }}
	l, err := lock.New(f, &lock.Options{KeepAlive: true}).TryAcquire(context.Background(), "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// The release's outcome is unknown: the lease stays as it was, but
	// its keep-alive is stopped, so nothing renews it any more.
	if err := l.Release(context.Background()); !errors.Is(err, errNetwork) {
		t.Fatalf("Release = %v; want the network error", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err after a release of unknown outcome = %v; want nil until the deadline", err)
	}
	// Taken while the lease is live; nothing else looks at the lease from
	// here, so only the deadline timer can close it.
	done := l.Done()
	deadline := l.Deadline()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("Done still open %v after the deadline of a lease nobody renews", time.Since(deadline))
	}
	if closed := time.Now(); closed.Before(deadline) {
		t.Errorf("Done closed %v before the local deadline", deadline.Sub(closed))
	}
	if err := l.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", err)
	}
}
