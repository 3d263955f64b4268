package locktest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Durations the checks use. A short TTL is one the checks wait out; a long
// TTL is one that must not run out during a check.
const (
	shortTTL = 60 * time.Millisecond
	longTTL  = 10 * time.Second
	waitFor  = 5 * time.Second // how long to poll for an expected state
	// tolerance is the rounding a backend may apply to a TTL it reports
	// or enforces: Redis keeps expiry times in whole milliseconds.
	tolerance = 5 * time.Millisecond
)

func owner() string {
	o, err := lock.NewOwner()
	if err != nil {
		panic(err)
	}
	return o
}

// acquire fails unless owner takes name.
func acquire(ctx context.Context, b lock.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	tok, err := b.Acquire(ctx, name, owner, ttl)
	if err != nil {
		return 0, fmt.Errorf("Acquire(%q) on a free lock: %w", name, err)
	}
	if !tok.Valid() {
		return 0, fmt.Errorf("Acquire(%q) minted token %d, outside 1..MaxToken", name, tok)
	}
	return tok, nil
}

// expectHolder fails unless Inspect reports owner holding name with token.
func expectHolder(ctx context.Context, b lock.Backend, name, owner string, token fence.Token) error {
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if !info.Held || info.Owner != owner || info.Token != token {
		return fmt.Errorf("Inspect(%q) = held %v by %q with token %d; want held by %q with token %d", name, info.Held, info.Owner, info.Token, owner, token)
	}
	return nil
}

// expectFree fails unless Inspect reports name free, with the owner, token
// and TTL of a free lock all zero.
func expectFree(ctx context.Context, b lock.Backend, name string) error {
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if info.Held {
		return fmt.Errorf("Inspect(%q) = held by %q with token %d; want free", name, info.Owner, info.Token)
	}
	if info != (lock.Info{Name: name}) {
		return fmt.Errorf("Inspect(%q) of a free lock = %+v; want Name %q and every other field zero", name, info, name)
	}
	return nil
}

// waitFree polls until name is free, failing after waitFor.
func waitFree(ctx context.Context, b lock.Backend, name string) error {
	_, err := waitExpiry(ctx, b, name, time.Time{}, 0)
	return err
}

// waitExpiry polls until Inspect reports name free, failing after waitFor.
// The lease on name was granted for ttl by a call made at since (zero: not
// known): a free report that returned before since+ttl means the lease ended
// early. It returns when the free report came back.
func waitExpiry(ctx context.Context, b lock.Backend, name string, since time.Time, ttl time.Duration) (time.Time, error) {
	deadline := time.Now().Add(waitFor + ttl)
	for {
		info, err := b.Inspect(ctx, name)
		ret := time.Now()
		if err != nil {
			return ret, fmt.Errorf("Inspect(%q): %w", name, err)
		}
		if !info.Held {
			if !since.IsZero() && ret.Before(since.Add(ttl-tolerance)) {
				return ret, fmt.Errorf("lease on %q granted for %v ended after at most %v: a lease must last its whole TTL", name, ttl, ret.Sub(since))
			}
			return ret, nil
		}
		if ret.After(deadline) {
			return ret, fmt.Errorf("lock %q still held %v after its TTL should have run out (TTL left %v)", name, waitFor, info.TTL)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return ret, err
		}
	}
}

// window is the wall-clock span of one backend call: it took effect, if at
// all, between call and ret.
type window struct{ call, ret time.Time }

// timed runs op and returns its window.
func timed(op func()) window {
	w := window{call: time.Now()}
	op()
	w.ret = time.Now()
	return w
}

// acquireTimed acquires name for owner and returns the token with the
// window of the call that got it, for checks that judge a TTL against it.
func acquireTimed(ctx context.Context, b lock.Backend, name, owner string, ttl time.Duration) (tok fence.Token, w window, err error) {
	w = timed(func() { tok, err = acquire(ctx, b, name, owner, ttl) })
	return tok, w, err
}

// expectLease fails unless Inspect reports owner holding name with token
// and a remaining TTL that fits a lease granted (or renewed) for ttl by the
// call in window granted.
func expectLease(ctx context.Context, b lock.Backend, name, owner string, token fence.Token, ttl time.Duration, granted window) error {
	var info lock.Info
	var err error
	at := timed(func() { info, err = b.Inspect(ctx, name) })
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if info.Name != name || !info.Held || info.Owner != owner || info.Token != token {
		return fmt.Errorf("Inspect(%q) = %+v; want held by %q with token %d", name, info, owner, token)
	}
	return ttlWithinGranular("Inspect", info.TTL, ttl, granularity(b), granted, at)
}

// ttlWithin fails unless got, a remaining TTL reported by the call in
// window at about a lease granted for ttl by the call in window granted,
// lies in the range the two windows allow: at most ttl minus the time
// surely gone since, at least ttl minus the time at most gone since.
func ttlWithin(what string, got, ttl time.Duration, granted, at window) error {
	return ttlWithinGranular(what, got, ttl, 0, granted, at)
}

// ttlWithinGranular is ttlWithin for a backend with TTL granularity g (see
// Granular): the reported TTL may be up to g off either way.
func ttlWithinGranular(what string, got, ttl, g time.Duration, granted, at window) error {
	surely, atMost := at.call.Sub(granted.ret), at.ret.Sub(granted.call)
	switch {
	case got <= 0:
		return fmt.Errorf("%s reported TTL %v for a live lease; want the remaining TTL, above 0", what, got)
	case got > ttl-surely+g+tolerance:
		return fmt.Errorf("%s reported TTL %v for a lease set to %v at least %v earlier; want the remaining TTL, at most %v%s", what, got, ttl, surely.Round(time.Millisecond), ttl-surely+g, granularNote(g))
	case got < ttl-atMost-g-tolerance:
		return fmt.Errorf("%s reported TTL %v for a lease set to %v at most %v earlier; want at least %v%s: the lease is shorter than asked", what, got, ttl, atMost.Round(time.Millisecond), ttl-atMost-g, granularNote(g))
	}
	return nil
}

// waitChan waits for ch to close, failing after waitFor.
func waitChan(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(waitFor):
		return fmt.Errorf("%s did not happen within %v", what, waitFor)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func expectIs(op string, err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("%s: error %v; want one matching %v", op, err, target)
	}
	return nil
}

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
