package drivertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
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

// The driver's calls on an exclusive lock, as the checks make them.

// lockRequest asks for the lock name for owner for ttl: no place in line,
// one name, no metadata.
func lockRequest(name, owner string, ttl time.Duration) driver.Request {
	return driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive}
}

// lockClaim names owner's lease (or place) on the lock name.
func lockClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
}

// take asks b for the lock name for owner, as one plain Acquire.
func take(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, lockRequest(name, owner, ttl))
	return g.Token, err
}

// extend renews owner's lease on the lock name.
func extend(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	return b.Extend(ctx, lockClaim(name, owner), ttl)
}

// release gives up owner's lease on the lock name.
func release(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, lockClaim(name, owner))
}

// acquire fails unless owner takes name, with a grant of a single lock: a
// valid token, no set tokens, no prior writer.
func acquire(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	return acquireReq(ctx, b, lockRequest(name, owner, ttl))
}

// acquireReq fails unless req, a request for one lock, is granted.
func acquireReq(ctx context.Context, b driver.Backend, req driver.Request) (fence.Token, error) {
	g, err := b.Acquire(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("Acquire(%q) on a free lock: %w", req.Name, err)
	}
	switch {
	case !g.Token.Valid():
		return 0, fmt.Errorf("Acquire(%q) minted token %d, outside 1..MaxToken", req.Name, g.Token)
	case g.Tokens != nil:
		return 0, fmt.Errorf("Acquire(%q) of one name granted set tokens %v; want Grant.Tokens nil", req.Name, g.Tokens)
	case g.PriorWriter != 0:
		return 0, fmt.Errorf("Acquire(%q) of a lock granted PriorWriter %d; want 0 (a lock has no writers)", req.Name, g.PriorWriter)
	}
	return g.Token, nil
}

// lockInfo is what Inspect reports of a lock, which has at most one holder.
type lockInfo struct {
	Name     string
	Held     bool          // whether a lease is live
	Owner    string        // the holder's owner value; empty when free
	Token    fence.Token   // the holder's token; 0 when free
	TTL      time.Duration // the holder's remaining time to live; 0 when free
	Metadata string        // the holder's metadata
	Waiting  int           // live places in line
}

// inspect asks b about the lock called name, and fails unless the answer
// has a lock's shape: Name and Kind Exclusive, at most one holder, of kind
// Exclusive, and no limit or last writer.
func inspect(ctx context.Context, b driver.Backend, name string) (lockInfo, error) {
	info, err := b.Inspect(ctx, name, driver.Exclusive)
	if err != nil {
		return lockInfo{}, fmt.Errorf("Inspect(%q): %w", name, err)
	}
	switch {
	case info.Name != name:
		return lockInfo{}, fmt.Errorf("Inspect(%q) reported Name %q", name, info.Name)
	case info.Kind != driver.Exclusive:
		return lockInfo{}, fmt.Errorf("Inspect(%q, Exclusive) reported Kind %v; want exclusive, a lock's", name, info.Kind)
	case len(info.Holders) > 1:
		return lockInfo{}, fmt.Errorf("Inspect(%q) reported %d holders of one lock: %+v", name, len(info.Holders), info.Holders)
	case info.Limit != 0 || info.LastWriter != 0:
		return lockInfo{}, fmt.Errorf("Inspect(%q) of a lock reported Limit %d and LastWriter %d; want 0 and 0", name, info.Limit, info.LastWriter)
	case info.Waiting < 0:
		return lockInfo{}, fmt.Errorf("Inspect(%q) reported %d waiting", name, info.Waiting)
	}
	v := lockInfo{Name: name, Waiting: info.Waiting}
	if len(info.Holders) == 1 {
		h := info.Holders[0]
		if h.Kind != driver.Exclusive {
			return lockInfo{}, fmt.Errorf("Inspect(%q) reported a holder of kind %v; want exclusive, a lock's", name, h.Kind)
		}
		v.Held, v.Owner, v.Token, v.TTL, v.Metadata = true, h.Owner, h.Token, h.TTL, h.Metadata
	}
	return v, nil
}

// expectHolder fails unless Inspect reports owner holding name with token.
func expectHolder(ctx context.Context, b driver.Backend, name, owner string, token fence.Token) error {
	info, err := inspect(ctx, b, name)
	if err != nil {
		return err
	}
	if !info.Held || info.Owner != owner || info.Token != token {
		return fmt.Errorf("Inspect(%q) = held %v by %q with token %d; want held by %q with token %d", name, info.Held, info.Owner, info.Token, owner, token)
	}
	return nil
}

// expectFree fails unless Inspect reports name free, with the owner, token,
// TTL and metadata of a free lock all zero, and nobody in line.
func expectFree(ctx context.Context, b driver.Backend, name string) error {
	info, err := inspect(ctx, b, name)
	if err != nil {
		return err
	}
	if info.Held {
		return fmt.Errorf("Inspect(%q) = held by %q with token %d; want free", name, info.Owner, info.Token)
	}
	if info != (lockInfo{Name: name}) {
		return fmt.Errorf("Inspect(%q) of a free lock = %+v; want Name %q and every other field zero", name, info, name)
	}
	return nil
}

// waitFree polls until name is free, failing after waitFor.
func waitFree(ctx context.Context, b driver.Backend, name string) error {
	_, err := waitExpiry(ctx, b, name, time.Time{}, 0)
	return err
}

// waitExpiry polls until Inspect reports name free, failing after waitFor.
// The lease on name was granted for ttl by a call made at since (zero: not
// known): a free report that returned before since+ttl means the lease ended
// early. It returns when the free report came back.
func waitExpiry(ctx context.Context, b driver.Backend, name string, since time.Time, ttl time.Duration) (time.Time, error) {
	deadline := time.Now().Add(waitFor + ttl)
	for {
		info, err := inspect(ctx, b, name)
		ret := time.Now()
		if err != nil {
			return ret, err
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
func acquireTimed(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (tok fence.Token, w window, err error) {
	w = timed(func() { tok, err = acquire(ctx, b, name, owner, ttl) })
	return tok, w, err
}

// expectLease fails unless Inspect reports owner holding name with token
// and a remaining TTL that fits a lease granted (or renewed) for ttl by the
// call in window granted.
func expectLease(ctx context.Context, b driver.Backend, name, owner string, token fence.Token, ttl time.Duration, granted window) error {
	var info lockInfo
	var err error
	at := timed(func() { info, err = inspect(ctx, b, name) })
	if err != nil {
		return err
	}
	if info.Name != name || !info.Held || info.Owner != owner || info.Token != token {
		return fmt.Errorf("Inspect(%q) = %+v; want held by %q with token %d", name, info, owner, token)
	}
	return ttlWithinGranular("Inspect", info.TTL, ttl, granularity(ctx), granted, at)
}

// ttlWithin fails unless got, a remaining TTL reported by the call in
// window at about a lease granted for ttl by the call in window granted,
// lies in the range the two windows allow: at most ttl minus the time
// surely gone since, at least ttl minus the time at most gone since.
func ttlWithin(what string, got, ttl time.Duration, granted, at window) error {
	return ttlWithinGranular(what, got, ttl, 0, granted, at)
}

// ttlWithinGranular is ttlWithin for a backend with declared TTL granularity
// g (see TTLGranularity): the reported TTL may be up to g off either way.
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
