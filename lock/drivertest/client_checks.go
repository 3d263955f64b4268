package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// clientChecks are the checks of lock.Client and lock.Lease over the
// backend: backoff, keep-alive, loss detection and Do.
func clientChecks() []Check {
	return []Check{
		{"ClientTryAcquireHeld", checkTryAcquireHeld},
		{"ClientAcquireBoundedByContext", checkAcquireBoundedByContext},
		{"ClientAcquireBoundedByAttempts", checkAcquireBoundedByAttempts},
		{"ClientAcquireWaitsForRelease", checkAcquireWaitsForRelease},
		{"LeaseTTLAndRelease", checkLeaseTTLAndRelease},
		{"LeaseLostAtLocalDeadline", checkLostAtDeadline},
		{"KeepAliveHoldsAcrossTTLs", checkKeepAlive},
		{"KeepAliveDetectsLoss", checkKeepAliveDetectsLoss},
		{"DoCancelsOnLoss", checkDoCancelsOnLoss},
		{"DoReleasesAfterwards", checkDoReleases},
	}
}

func checkTryAcquireHeld(ctx context.Context, b driver.Backend, ns string) error {
	c := lock.New(b, nil)
	name := ns + "l"
	l, err := c.TryAcquire(ctx, name, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquire of a free lock: %w", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	_, err = c.TryAcquire(ctx, name, longTTL)
	return first(
		expectIs("TryAcquire of a held lock", err, lock.ErrNotAcquired),
		expectIs("TryAcquire of a held lock", err, lock.ErrHeld),
	)
}

func checkAcquireBoundedByContext(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	if _, err := acquire(ctx, b, name, owner(), longTTL); err != nil {
		return err
	}
	seen := &heldSeen{Backend: b}
	c := lock.New(seen, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(short, name, longTTL)
	// The error says why the lock was not taken (held) once the backend
	// has said so; a loaded server may answer no attempt within the
	// 100 ms, and then only the context's end is known.
	var why error
	if seen.held.Load() {
		why = expectIs("Acquire of a held lock until the context ends, refused as held by the backend", err, lock.ErrHeld)
	}
	return first(
		expectIs("Acquire of a held lock until the context ends", err, lock.ErrNotAcquired),
		expectIs("Acquire of a held lock until the context ends", err, context.DeadlineExceeded),
		why,
	)
}

// heldSeen notes whether the backend ever answered an Acquire with
// ErrHeld.
type heldSeen struct {
	driver.Backend
	held atomic.Bool
}

func (h *heldSeen) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := h.Backend.Acquire(ctx, req)
	if errors.Is(err, driver.ErrHeld) {
		h.held.Store(true)
	}
	return g, err
}

// countingBackend counts Acquire calls.
type countingBackend struct {
	driver.Backend
	acquires atomic.Int64
}

func (c *countingBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	c.acquires.Add(1)
	return c.Backend.Acquire(ctx, req)
}

func checkAcquireBoundedByAttempts(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	if _, err := acquire(ctx, b, name, owner(), longTTL); err != nil {
		return err
	}
	counting := &countingBackend{Backend: b}
	// Every request in line is an attempt too; a short place keeps the
	// waits between them short.
	c := lock.New(counting, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxAttempts: 3,
		Queue: lock.QueueOptions{PlaceTTL: 30 * time.Millisecond}})
	_, err := c.Acquire(ctx, name, longTTL)
	if err := expectIs("Acquire with MaxAttempts 3", err, lock.ErrNotAcquired); err != nil {
		return err
	}
	if n := counting.acquires.Load(); n != 3 {
		return fmt.Errorf("Acquire with MaxAttempts 3 made %d attempts", n)
	}
	return nil
}

func checkAcquireWaitsForRelease(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	firstToken, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	type result struct {
		lease *lock.Lease
		err   error
	}
	got := make(chan result, 1)
	attempts := make(chan struct{}, 1)
	probe := &probeBackend{Backend: b, held: attempts}
	c := lock.New(probe, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	go func() {
		l, err := c.Acquire(ctx, name, longTTL)
		got <- result{l, err}
	}()
	// Release only once the waiter has been refused at least once.
	select {
	case <-attempts:
	case <-time.After(waitFor):
		return fmt.Errorf("the waiting Acquire made no attempt within %v", waitFor)
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			return fmt.Errorf("Acquire after the holder released: %w", r.err)
		}
		defer r.lease.Release(context.WithoutCancel(ctx))
		if r.lease.Token() <= firstToken {
			return fmt.Errorf("waiter's token %d is not above the first holder's %d", r.lease.Token(), firstToken)
		}
		return expectHolder(ctx, b, name, r.lease.Owner(), r.lease.Token())
	case <-time.After(waitFor):
		return fmt.Errorf("Acquire did not return within %v of the release", waitFor)
	}
}

// probeBackend signals when an Acquire was refused as held.
type probeBackend struct {
	driver.Backend
	held chan struct{}
}

func (p *probeBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := p.Backend.Acquire(ctx, req)
	if errors.Is(err, driver.ErrHeld) {
		select {
		case p.held <- struct{}{}:
		default:
		}
	}
	return g, err
}

func checkLeaseTTLAndRelease(ctx context.Context, b driver.Backend, ns string) error {
	c := lock.New(b, nil)
	name := ns + "l"
	before := time.Now()
	l, err := c.TryAcquire(ctx, name, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	if l.Name() != name || !l.Token().Valid() || len(l.Owner()) != 32 {
		return fmt.Errorf("lease name %q token %d owner %q; want %q, a valid token, 32 hex digits", l.Name(), l.Token(), l.Owner(), name)
	}
	if d := l.Deadline(); !d.After(before) || d.After(before.Add(longTTL)) {
		return fmt.Errorf("lease deadline %v is not within (start, start+ttl]", d.Sub(before))
	}
	ttl, err := l.TTL(ctx)
	if err != nil {
		return fmt.Errorf("Lease.TTL: %w", err)
	}
	if ttl <= 0 || ttl > longTTL {
		return fmt.Errorf("Lease.TTL = %v; want in (0, %v]", ttl, longTTL)
	}
	if err := l.Extend(ctx, longTTL); err != nil {
		return fmt.Errorf("Lease.Extend: %w", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("Lease.Release: %w", err)
	}
	if err := waitChan(ctx, l.Done(), "Done after Release"); err != nil {
		return err
	}
	return first(
		expectIs("Lease.Err after Release", l.Err(), lock.ErrReleased),
		expectIs("Lease.Extend after Release", l.Extend(ctx, longTTL), lock.ErrNotHeld),
		expectFree(ctx, b, name),
	)
}

func checkLostAtDeadline(ctx context.Context, b driver.Backend, ns string) error {
	c := lock.New(b, nil)
	// A TTL below the backend's declared TTL granularity would be rounded
	// up anyway. Four times shortTTL: TryAcquire fails when its reply
	// arrives after the local deadline, which a 60 ms TTL saw once on a
	// loaded machine.
	l, err := c.TryAcquire(ctx, ns+"l", max(4*shortTTL, granularity(ctx)))
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	if err := waitChan(ctx, l.Done(), "Done at the local deadline without keep-alive"); err != nil {
		return err
	}
	if time.Now().Before(l.Deadline()) {
		return fmt.Errorf("lease reported lost %v before its local deadline", time.Until(l.Deadline()))
	}
	return first(
		expectIs("Lease.Err", l.Err(), lock.ErrLost),
		expectIs("context.Cause(Lease.Context())", context.Cause(l.Context()), lock.ErrLost),
	)
}

func checkKeepAlive(ctx context.Context, b driver.Backend, ns string) error {
	// The backend's declared TTL granularity, when longer: the lease lasts
	// that long anyway. 900 ms: renewals go every third of the TTL, so a renewal that a loaded
	// machine delays by two thirds of it loses the lease, and at 300 ms that
	// happened on a shared 2-core machine at load 12-16. Below a second, so
	// that a backend sending whole seconds (0 here) is still caught.
	ttl := max(900*time.Millisecond, granularity(ctx))
	extended := make(chan struct{}, 64)
	c := lock.New(b, &lock.Options{KeepAlive: true, Observer: &lock.Observer{Extended: func(lock.Event) {
		select {
		case extended <- struct{}{}:
		default:
		}
	}}})
	l, err := c.TryAcquire(ctx, ns+"l", ttl)
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	// Hold it across several TTLs: at the default interval, 6 renewals
	// span two TTLs.
	for i := 0; i < 6; i++ {
		select {
		case <-extended:
		case <-l.Done():
			return fmt.Errorf("lease lost after %d renewals: %v", i, l.Err())
		case <-time.After(waitFor):
			return fmt.Errorf("no renewal within %v after %d renewals", waitFor, i)
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("lease ended while kept alive: %w", err)
	}
	if err := expectHolder(ctx, b, ns+"l", l.Owner(), l.Token()); err != nil {
		return err
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	return expectFree(ctx, b, ns+"l")
}

func checkKeepAliveDetectsLoss(ctx context.Context, b driver.Backend, ns string) error {
	c := lock.New(b, &lock.Options{KeepAlive: true})
	l, err := c.TryAcquire(ctx, ns+"l", max(300*time.Millisecond, granularity(ctx)))
	if err != nil {
		return fmt.Errorf("TryAcquire: %w", err)
	}
	// The backend drops the lease behind the client's back, as a restart
	// without persistence or a failover would.
	if err := release(ctx, b, l.Name(), l.Owner()); err != nil {
		return fmt.Errorf("dropping the lease: %w", err)
	}
	if err := waitChan(ctx, l.Done(), "Done after the backend dropped the lease"); err != nil {
		return err
	}
	return first(
		expectIs("Lease.Err", l.Err(), lock.ErrLost),
		expectIs("context.Cause(Lease.Context())", context.Cause(l.Context()), lock.ErrLost),
	)
}

func checkDoCancelsOnLoss(ctx context.Context, b driver.Backend, ns string) error {
	c := lock.New(b, nil)
	name := ns + "l"
	var cause error
	err := c.Do(ctx, name, max(300*time.Millisecond, granularity(ctx)), func(fnCtx context.Context, l *lock.Lease) error {
		if err := release(ctx, b, l.Name(), l.Owner()); err != nil {
			return fmt.Errorf("dropping the lease: %w", err)
		}
		if err := waitChan(ctx, fnCtx.Done(), "fn's context cancelled after the lease was lost"); err != nil {
			return err
		}
		cause = context.Cause(fnCtx)
		return nil
	})
	return first(
		expectIs("Do's error after the lease was lost", err, lock.ErrLost),
		expectIs("the cause of fn's context", cause, lock.ErrLost),
		expectFree(ctx, b, name),
	)
}

func checkDoReleases(ctx context.Context, b driver.Backend, ns string) error {
	c := lock.New(b, nil)
	name := ns + "l"
	var token fence.Token
	err := c.Do(ctx, name, longTTL, func(fnCtx context.Context, l *lock.Lease) error {
		token = l.Token()
		return expectHolder(fnCtx, b, name, l.Owner(), l.Token())
	})
	if err != nil {
		return fmt.Errorf("Do: %w", err)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return fmt.Errorf("after Do returned: %w", err)
	}
	boom := errors.New("boom")
	err = c.Do(ctx, name, longTTL, func(context.Context, *lock.Lease) error { return boom })
	if !errors.Is(err, boom) {
		return fmt.Errorf("Do returned %v; want fn's error", err)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return fmt.Errorf("after Do's fn failed: %w", err)
	}
	next, err := acquire(ctx, b, name, owner(), longTTL)
	if err != nil {
		return err
	}
	if next <= token {
		return fmt.Errorf("token after Do %d is not above Do's %d", next, token)
	}
	return nil
}
