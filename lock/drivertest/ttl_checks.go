package drivertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

func granularNote(g time.Duration) string {
	if g == 0 {
		return ""
	}
	return fmt.Sprintf(" (give or take the backend's declared TTL granularity, %v)", g)
}

// checkInspectRemaining: Inspect reports the time a lease has left, not the
// TTL it was granted with.
func checkInspectRemaining(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	// Let time pass, so that the remaining TTL and the granted one differ
	// by far more than any rounding.
	if err := sleep(ctx, 100*time.Millisecond); err != nil {
		return err
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

// checkHeldErrorTTL: a *driver.HeldError, when the backend returns one,
// carries the holder's remaining TTL (or 0 for unknown), never more and
// never a negative one.
func checkHeldErrorTTL(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	var err error
	w := timed(func() { _, err = acquire(ctx, b, name, owner(), longTTL) })
	if err != nil {
		return err
	}
	if err := sleep(ctx, 100*time.Millisecond); err != nil {
		return err
	}
	var held *driver.HeldError
	at := timed(func() { _, err = take(ctx, b, name, owner(), longTTL) })
	if !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire by a second owner while held: %v; want an error matching driver.ErrHeld", err)
	}
	if !errors.As(err, &held) || held.TTL == 0 {
		return nil // the TTL is optional
	}
	if held.Name != name {
		return fmt.Errorf("HeldError.Name = %q; want %q", held.Name, name)
	}
	return ttlWithinGranular("HeldError", held.TTL, longTTL, granularity(ctx), w, at)
}

// checkExtendFromNow: Extend sets the lease to end ttl after the call,
// whether that is later or sooner than before; it does not add to the old
// expiry, and it keeps the token.
func checkExtendFromNow(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	for _, ttl := range []time.Duration{2 * longTTL, 2345 * time.Millisecond, longTTL} {
		w := timed(func() { err = extend(ctx, b, name, a, ttl) })
		if err != nil {
			return fmt.Errorf("Extend by the holder to %v: %w", ttl, err)
		}
		if err := expectLease(ctx, b, name, a, tok, ttl, w); err != nil {
			return fmt.Errorf("after Extend to %v: %w", ttl, err)
		}
	}
	return nil
}

// checkWrongOwnerExtendTTL: another owner's Extend, longer or shorter, leaves
// the holder's expiry as it was.
func checkWrongOwnerExtendTTL(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	for _, ttl := range []time.Duration{3 * longTTL, 200 * time.Millisecond} {
		if err := expectIs(fmt.Sprintf("Extend to %v by another owner", ttl), extend(ctx, b, name, owner(), ttl), driver.ErrNotHeld); err != nil {
			return err
		}
		if err := expectLease(ctx, b, name, a, tok, longTTL, w); err != nil {
			return fmt.Errorf("after another owner's Extend to %v: %w", ttl, err)
		}
	}
	return nil
}

// checkLeaseLasts: no one else can take a lock before the lease's TTL has
// run out since the call that granted it, nor before an extended lease's
// TTL has run out since the Extend. A backend that rounds a TTL down (to
// whole seconds, to a coarse clock's tick) ends leases while their holders'
// local deadlines are still ahead.
func checkLeaseLasts(ctx context.Context, b driver.Backend, ns string) error {
	// Neither is a multiple of 100ms, so that rounding down shows.
	const ttl, extended = 275 * time.Millisecond, 325 * time.Millisecond
	name, a := ns+"l", owner()
	start := time.Now()
	if _, err := acquire(ctx, b, name, a, ttl); err != nil {
		return err
	}
	next, taken, err := takeOver(ctx, b, name)
	if err != nil {
		return err
	}
	if taken.Before(start.Add(ttl - tolerance)) {
		return fmt.Errorf("a lease acquired for %v was taken over after at most %v", ttl, taken.Sub(start))
	}
	start = time.Now()
	if err := extend(ctx, b, name, next, extended); err != nil {
		return fmt.Errorf("Extend by the new holder: %w", err)
	}
	_, taken, err = takeOver(ctx, b, name)
	if err != nil {
		return err
	}
	if taken.Before(start.Add(extended - tolerance)) {
		return fmt.Errorf("a lease extended for %v was taken over after at most %v", extended, taken.Sub(start))
	}
	return nil
}

// takeOver polls Acquire by a new owner until it succeeds, and returns the
// owner and when the successful call returned.
func takeOver(ctx context.Context, b driver.Backend, name string) (string, time.Time, error) {
	o := owner()
	deadline := time.Now().Add(waitFor)
	for {
		_, err := take(ctx, b, name, o, longTTL)
		ret := time.Now()
		switch {
		case err == nil:
			return o, ret, nil
		case !errors.Is(err, driver.ErrHeld):
			return "", ret, fmt.Errorf("Acquire while waiting for a lease to expire: %v; want success or driver.ErrHeld", err)
		case ret.After(deadline):
			return "", ret, fmt.Errorf("lock %q still held %v after its TTL should have run out", name, waitFor)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return "", ret, err
		}
	}
}
