package lock

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// QueueBackend is an optional capability of a Backend: queued waiting.
// Client.Acquire and Client.Do use it when the backend has it, so that
// waiters are served in the order they arrived and are woken when the lock
// is released, instead of polling with backoff (where the worker that just
// released usually takes the lock straight back and the longest waiters
// starve). A Backend without it keeps working through polling.
//
// A waiter's place in the queue is a small lease of its own: each
// AcquireOrEnqueue by the waiter renews it for place, and a place not renewed
// in time expires, so a waiter that crashed, was cancelled or is cut off
// holds nobody up for longer than its place TTL. The Client renews every
// third of the place TTL (see QueueOptions).
//
// Implementations must meet these obligations, in addition to Backend's,
// which the package [github.com/fencekit/fencekit/lock/locktest] checks
// (RunQueue):
//
//   - AcquireOrEnqueue(name, owner, ttl, place), in one atomic step: it must
//     first drop every place whose expiry has passed. If owner holds the
//     lock, it must extend the lease and return the same token, as Acquire.
//     If the lock is free (or its lease expired) and no live place is ahead
//     of owner's (owner is first in line, or nobody waits), it must take the
//     lock exactly as Acquire does (a token greater than every token ever
//     issued for name, minted in the same step) and remove owner's place.
//     Otherwise it must keep owner's place, or add one at the tail when owner
//     has none (so a retried call never queues an owner twice), set that
//     place to expire place from now, and return an error for which
//     errors.Is(err, ErrHeld) is true. A *HeldError then carries the holder's
//     remaining TTL when owner is first in line, so that the Client wakes
//     itself when the holder's lease expires (no backend has to push that),
//     and 0 when others are ahead of owner.
//   - When nobody waits, AcquireOrEnqueue costs what Acquire costs: one round
//     trip.
//   - AwaitTurn(name, owner, max) must block until owner is woken, max has
//     passed, or ctx ends; it returns nil in the first two cases (the Client
//     then asks AcquireOrEnqueue again) and an error matching ctx.Err() in
//     the third. It may return early. A wake-up sent after owner's
//     AcquireOrEnqueue returned must not be lost, even if AwaitTurn is
//     called after it was sent.
//   - Release must wake the waiter that is first in line. So must
//     LeaveQueue, and the expiry of a place, when they make another waiter
//     first while the lock is free; a backend that cannot push those may
//     leave them to the waiters' next renewal, which comes within a third of
//     their place TTL.
//   - LeaveQueue(name, owner) removes owner's place; it returns nil when
//     owner has none.
//   - Acquire (and so TryAcquire) does not queue and may ignore the queue:
//     it may take a free lock ahead of queued waiters.
//   - Bad input: as Backend, and a place below MinPlaceTTL is refused with
//     ErrInvalid before anything is sent (ValidatePlace).
//
// Types that satisfy QueueBackend in this module: *memory.Backend,
// *redis.Backend, *postgres.Backend and *sqldb.Backend; in modules of
// their own, the etcd adapter's *etcd.Backend and the NATS adapter's
// *nats.Backend.
type QueueBackend interface {
	Backend
	// AcquireOrEnqueue takes name for owner when it is owner's turn, and
	// otherwise keeps owner's place in the queue for place.
	AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error)
	// AwaitTurn waits until owner is woken, at most max.
	AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error
	// LeaveQueue gives up owner's place in the queue for name.
	LeaveQueue(ctx context.Context, name, owner string) error
}

// QueueOptions configures queued waiting, on a backend that offers it
// (QueueBackend). The zero value means the defaults.
type QueueOptions struct {
	// Polling makes Acquire and Do poll with backoff, as they do on a
	// backend without the capability, instead of queueing: faster when
	// fairness does not matter (the releasing worker usually takes the lock
	// back at once), unfair under contention.
	Polling bool
	// PlaceTTL is how long a waiter's place outlives its last renewal:
	// the bound on how long a waiter that died holds up the ones behind it.
	// A waiter renews its place every third of it. DefaultPlaceTTL when
	// zero; at least MinPlaceTTL.
	PlaceTTL time.Duration
}

// DefaultPlaceTTL is the place TTL when QueueOptions leaves it at zero.
const DefaultPlaceTTL = 2 * time.Second

// MinPlaceTTL is the shortest place TTL a QueueBackend accepts.
const MinPlaceTTL = 10 * time.Millisecond

// ValidatePlace checks the arguments of AcquireOrEnqueue, as ValidateArgs
// does for Acquire, and the place TTL.
func ValidatePlace(name, owner string, ttl, place time.Duration) error {
	if err := ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	if place < MinPlaceTTL {
		return fence.Invalid("place ttl %v is below the minimum %v", place, MinPlaceTTL)
	}
	return nil
}

// placeTTL returns the place TTL these options ask for.
func (o QueueOptions) placeTTL() time.Duration {
	if o.PlaceTTL == 0 {
		return DefaultPlaceTTL
	}
	return o.PlaceTTL
}

// queue returns the backend's queued waiting when this call may use it:
// the backend has it, the options do not ask for polling, and the call may
// wait at all (an Acquire limited to one attempt waits for nothing, so it
// behaves as TryAcquire).
func (c *Client) queue(maxAttempts int) (QueueBackend, bool) {
	q, ok := c.backend.(QueueBackend)
	if !ok || c.opts.Queue.Polling || maxAttempts == 1 {
		return nil, false
	}
	return q, true
}

// enqueuer is a QueueBackend seen as a Backend whose Acquire queues, so
// that a queued attempt goes through Client.attempt as any other. The lease
// keeps it as its backend: Extend, Release and Inspect go to q unchanged.
type enqueuer struct {
	QueueBackend
	place time.Duration
}

func (e enqueuer) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	return e.AcquireOrEnqueue(ctx, name, owner, ttl, e.place)
}

// acquireQueued is Acquire over a QueueBackend: each attempt takes the lock
// if it is owner's turn and otherwise renews owner's place, then waits to be
// woken (by a release, or by the holder's expiry, whose time the backend
// reported), at most a third of the place TTL, which is when the place must
// be renewed. It honours the context and the attempt limit as Acquire does
// (every AcquireOrEnqueue is an attempt, and each one that fails is reported
// as EventRetrying), backs off as Acquire does after a transient failure, and
// gives up its place when it gives up.
func (c *Client) acquireQueued(ctx context.Context, q QueueBackend, name, owner string, ttl time.Duration, maxAttempts int, keepAlive bool) (*Lease, error) {
	place := c.opts.Queue.placeTTL()
	if err := ValidatePlace(name, owner, ttl, place); err != nil {
		return nil, err
	}
	cc := *c
	cc.backend = enqueuer{QueueBackend: q, place: place}
	renewEvery := place / 3

	var (
		last      error
		ambiguous bool // an attempt may have taken the lock without our knowing
	)
	giveUp := func(err error) (*Lease, error) {
		c.leaveQueue(ctx, q, name, owner, place)
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
		if !Retryable(err) && ctx.Err() == nil {
			return giveUp(permanent(name, attempt, err))
		}
		if keep {
			last = err
		}
		if ctx.Err() != nil || (maxAttempts > 0 && attempt >= maxAttempts) {
			return giveUp(notAcquired(ctx, name, attempt, last))
		}
		c.observe(Event{Kind: EventRetrying, Name: name, Err: err, Attempt: attempt})
		if held {
			wait := renewEvery
			var he *HeldError
			if errors.As(err, &he) && he.TTL > 0 && he.TTL < wait {
				wait = he.TTL // first in line: wake when the holder's lease ends
			}
			if werr := q.AwaitTurn(ctx, name, owner, wait); werr != nil && ctx.Err() == nil {
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
func (c *Client) leaveQueue(ctx context.Context, q QueueBackend, name, owner string, place time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), place)
	defer cancel()
	_ = bounded(rctx, func(ctx context.Context) error { return q.LeaveQueue(ctx, name, owner) })
}
