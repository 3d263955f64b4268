package lock

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// QueueOptions configures queued waiting. The zero value means the
// defaults.
type QueueOptions struct {
	// Polling makes Acquire and Do poll with backoff instead of waiting in
	// line: faster when
	// fairness does not matter (the releasing worker usually takes the lock
	// back at once), unfair under contention.
	Polling bool
	// PlaceTTL is how long a waiter's place outlives its last renewal:
	// the bound on how long a waiter that died holds up the ones behind it.
	// A waiter renews its place every third of it. 2s when zero; at least
	// 10ms.
	PlaceTTL time.Duration
}

// defaultPlaceTTL is the place TTL when QueueOptions leaves it at zero.
const defaultPlaceTTL = 2 * time.Second

// placeTTL returns the place TTL these options ask for.
func (o QueueOptions) placeTTL() time.Duration {
	if o.PlaceTTL == 0 {
		return defaultPlaceTTL
	}
	return o.PlaceTTL
}

// queued reports whether this call waits in line: the options do not ask
// for polling, and the call may wait at all (an Acquire limited to one
// attempt waits for nothing, so it behaves as TryAcquire).
func (c *Client) queued(maxAttempts int) bool {
	return !c.opts.Queue.Polling && maxAttempts != 1
}

// acquireQueued is Acquire in line: each attempt takes the lock
// if it is owner's turn and otherwise renews owner's place, then waits to be
// woken (by a release, or by the holder's expiry, whose time the backend
// reported), at most a third of the place TTL, which is when the place must
// be renewed. It honours the context and the attempt limit as Acquire does
// (every request is an attempt, and each one that fails is reported to
// Observer.Retrying), backs off as Acquire does after a transient failure,
// and gives up its place when it gives up.
func (c *Client) acquireQueued(ctx context.Context, name, owner string, ttl time.Duration, maxAttempts int, keepAlive bool) (*Lease, error) {
	place := c.opts.Queue.placeTTL()
	cc := *c
	cc.place = place // every attempt keeps the place; the lease's calls ignore it
	renewEvery := place / 3

	var (
		last      error
		ambiguous bool // an attempt may have taken the lock without our knowing
	)
	giveUp := func(err error) (*Lease, error) {
		c.leaveQueue(ctx, name, owner, place)
		if ambiguous {
			c.abandon(ctx, name, owner, ttl)
		}
		return nil, err
	}
	began := time.Now()
	// Options.MaxUnreachable bounds a run of attempts that got no answer
	// about the lock, as in Client.acquire; a place kept in line (ErrHeld)
	// is an answer, so waiting in line is never cut short by it.
	bound := c.opts.unreachableBound()
	r := newReach(bound)
	for attempt := 1; ; attempt++ {
		actx, cancel := r.attempt(ctx)
		lease, err := cc.attempt(actx, name, owner, ttl, keepAlive, began, attempt)
		keep := keepLast(ctx, actx, last)
		cancel()
		if err == nil {
			if ambiguous {
				lease.mayLandLate(ttl) // an earlier attempt may still land: see Lease.Extend
			}
			return lease, nil
		}
		if errors.Is(err, ErrInvalid) {
			return giveUp(err)
		}
		r.result(err)
		held := errors.Is(err, ErrHeld)
		if !held {
			ambiguous = true
		}
		if !driver.Retryable(err) && ctx.Err() == nil {
			return giveUp(permanent(name, attempt, err))
		}
		if keep {
			last = err
		}
		if ctx.Err() != nil || (maxAttempts > 0 && attempt >= maxAttempts) {
			return giveUp(notAcquired(ctx, name, attempt, last))
		}
		c.observe(Event{kind: eventRetrying, Name: name, Err: err, Attempt: attempt})
		if held {
			wait := renewEvery
			var he *driver.HeldError
			if errors.As(err, &he) && he.TTL > 0 && he.TTL < wait {
				wait = he.TTL // first in line: wake when the holder's lease ends
			}
			if werr := c.driver.Await(ctx, c.claim(name, owner), wait); werr != nil && ctx.Err() == nil {
				// The wake-up channel failed (not the context): fall back to
				// sleeping, so that the place is still renewed in time.
				if !sleep(ctx, wait) {
					return giveUp(notAcquired(ctx, name, attempt, last))
				}
			}
			if ctx.Err() != nil {
				return giveUp(notAcquired(ctx, name, attempt, last))
			}
			continue
		}
		// Back off as Acquire does, but renew the place in time.
		wait := min(c.backoff(attempt, last), renewEvery)
		if r.exceeded(wait) {
			// The next attempt would start after the bound: the backend
			// has not answered for that long.
			return giveUp(unreachable(name, attempt, bound, last))
		}
		if !sleep(ctx, wait) {
			return giveUp(notAcquired(ctx, name, attempt, last))
		}
	}
}

// sleep pauses for d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// leaveQueue gives up owner's place when Acquire gives up, so that the
// waiters behind it need not wait for the place to expire. Best effort,
// bounded by the place TTL (after which the place expires anyway) even if
// the backend ignores its context.
func (c *Client) leaveQueue(ctx context.Context, name, owner string, place time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), place)
	defer cancel()
	_ = bounded(rctx, func(ctx context.Context) error { return c.driver.Leave(ctx, c.claim(name, owner)) })
}
