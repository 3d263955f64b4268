package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// TryAcquireMulti makes one attempt to acquire every lock in names for ttl,
// all or nothing. Each name gets its own lease and its own fencing token,
// greater than every earlier token for that name (MultiLease.Token); one
// owner value holds them all. When another owner holds one of them, the
// error matches ErrNotAcquired and ErrHeld (a *HeldError names that lock)
// and the caller holds none of them.
//
// On a backend that can take this set in one step (every shipped backend
// but NATS, and Redis Cluster for names in different hash slots), that is
// one round trip, and no other caller ever sees a part of the set taken.
// Otherwise the names are taken one by one in sorted order; when one is busy
// (or an attempt fails) every name the caller may hold (those taken, and the
// one whose attempt failed without saying who holds it) is released again,
// in reverse order, before TryAcquireMulti returns, so that another caller
// may see a part of the set held for the length of that pass but never for
// longer. The one exception is a release that fails (the backend
// unreachable, its reply lost): it is retried in the background until the
// backend confirms it or the lease it may have left has expired (ttl after
// the pass, plus the drift margin), so that name stays held, by a lease
// nobody uses, that long at most. names may come in any order; an empty
// set, more than 64 names, a name given twice, or an invalid name gets
// ErrInvalid and nothing is sent. ttl and opts are checked as Acquire's.
func (c *Client) TryAcquireMulti(ctx context.Context, names []string, ttl time.Duration, opts ...CallOption) (*MultiLease, error) {
	cc, keepAlive, err := c.forCall(false, opts)
	if err != nil {
		return nil, err
	}
	return cc.acquireMulti(ctx, names, ttl, 1, keepAlive)
}

// AcquireMulti blocks until it acquires every lock in names for ttl, as
// TryAcquireMulti takes them, and it never holds some of them while it
// waits for the others, so that two callers asking for {a, b} and {b, a}
// cannot deadlock. When one name is busy it lets go of whatever it holds and
// waits for that name alone: in line (unless QueueOptions.Polling), where its
// turn takes that name for it, or with backoff and full jitter otherwise; then it tries the whole
// set again, its own names included (a same-owner acquire keeps their
// tokens). Every request counts as an attempt, and it gives up as Acquire
// does (the context, Options.MaxAttempts, Options.MaxUnreachable, an error
// that a retry cannot cure), with an error matching ErrNotAcquired,
// releasing everything it may hold and leaving the queue (a release that
// fails then is retried in the background, as TryAcquireMulti's).
//
// What "never holds" means, after any pass that fails (a busy name, a
// transient error on any name, an acquire whose reply was lost, a reply that
// came too late): before it waits in line or backs off, it releases every
// name of the set it may hold (those the pass took, the one whose acquire
// failed without saying who holds it, and the one its turn in line took),
// and it retries each release that fails, with backoff, until the backend
// confirms it: released, or ErrNotHeld (a release whose reply was lost may
// have applied). Until then it takes no name and waits in no line. A
// release the backend never confirms is waited out: once the lease it may
// have left has expired (ttl after the pass, plus the drift margin) the
// caller goes on; when the context, an error that a retry cannot cure or
// Options.MaxUnreachable comes first, it gives up. The one name it may hold
// while it waits is the one it waits for: a request in line for it whose
// reply was lost may have taken it, and the next request in line (same
// owner) takes it for good or hears that it is busy.
//
// Waiting this way is free of deadlock but not of starvation: a caller that
// waited its turn for one name lets it go again when another name of its
// set is busy.
//
// The set is kept alive (one keep-alive for all its names) if
// Options.KeepAlive or WithKeepAlive says so.
func (c *Client) AcquireMulti(ctx context.Context, names []string, ttl time.Duration, opts ...CallOption) (*MultiLease, error) {
	cc, keepAlive, err := c.forCall(false, opts)
	if err != nil {
		return nil, err
	}
	return cc.acquireMulti(ctx, names, ttl, cc.opts.MaxAttempts, keepAlive)
}

// acquireMulti is AcquireMulti, or TryAcquireMulti when maxAttempts is 1.
func (c *Client) acquireMulti(ctx context.Context, names []string, ttl time.Duration, maxAttempts int, keepAlive bool) (*MultiLease, error) {
	owner, err := NewOwner()
	if err != nil {
		return nil, err
	}
	set, err := sortedSet(names, owner, ttl)
	if err != nil {
		return nil, err
	}
	if err := c.opts.checkTTL(ttl, keepAlive); err != nil {
		return nil, err
	}
	mdctx, err := c.metadataContext(ctx)
	if err != nil {
		return nil, err
	}
	queued := c.queued(maxAttempts)
	place := c.opts.Queue.placeTTL()
	if queued {
		if err := c.check(set[0], owner, ttl, true); err != nil {
			return nil, err
		}
	}
	// q asks for one name of the set in line (waitFor, below).
	q := *c
	q.place = place
	label := fmt.Sprintf("%q", set)

	var (
		last      error
		ambiguous bool   // an attempt may have left a name held without our knowing
		waitFor   string // the busy name this caller waits in line for, "" when none
		// mayHold are the names of the set that this owner may hold on
		// the backend, sorted: what a failed pass took (or may have
		// taken), and the name its turn in line took. Before the caller
		// waits for anything, it releases them all (letGo).
		mayHold []string
	)
	giveUp := func(err error) (*MultiLease, error) {
		if waitFor != "" {
			c.leaveQueue(mdctx, waitFor, owner, place)
		}
		names := mayHold
		if ambiguous {
			names = set // an attempt whose outcome is unknown may still land
		}
		if len(names) > 0 {
			values := context.WithoutCancel(mdctx)
			until := time.Now().Add(ttl + c.opts.drift(ttl))
			rctx, cancel := context.WithTimeout(values, ttl)
			left, _ := c.releaseNames(rctx, names, owner)
			cancel()
			if len(left) > 0 {
				c.releaseLater(values, left, owner, until)
			}
		}
		return nil, err
	}
	began := time.Now()
	bound := c.opts.unreachableBound()
	r := newReach(bound)
	// letGo releases every name in mayHold before the caller waits (in
	// line, or for its backoff), retrying a release that fails with a
	// failure a retry may cure, and returns nil once the backend confirmed
	// every release, or once until has passed: every request that may
	// have taken one of them has returned, so a lease it left has expired
	// by then. Meanwhile the caller takes nothing and waits in no line.
	// Otherwise it returns the error to give up with: the context ended,
	// a release failed for good, or the backend has not answered for
	// Options.MaxUnreachable. A confirmed release is no answer about the
	// set, so it leaves r as it was.
	letGo := func(attempt int) error {
		until := time.Now().Add(ttl + c.opts.drift(ttl))
		lr := *r
		var failed error // the last release failure not cut short by a deadline
		for round := 1; ; round++ {
			actx, cancel := lr.attempt(mdctx)
			rctx, rcancel := context.WithDeadline(actx, until)
			left, err := c.releaseNames(rctx, mayHold, owner)
			if err != nil && (failed == nil || rctx.Err() == nil) {
				failed = err
			}
			rcancel()
			cancel()
			mayHold = left
			switch {
			case err == nil:
				return nil
			case ctx.Err() != nil:
				return notAcquired(ctx, label, attempt, last)
			case !driver.Retryable(err):
				return permanent(label, attempt, err)
			case !time.Now().Before(until):
				*r, mayHold = lr, nil
				return nil
			}
			wait := min(c.backoff(round, nil), time.Until(until))
			if lr.exceeded(wait) {
				return unreachable(label, attempt, bound, failed)
			}
			if !sleep(ctx, wait) {
				return notAcquired(ctx, label, attempt, last)
			}
		}
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := r.attempt(mdctx)
		var err error
		if waitFor == "" {
			start := time.Now() // before the request: no lease of the set began earlier
			var (
				tokens []fence.Token
				taken  []string
			)
			tokens, taken, err = c.tryMulti(actx, set, owner, ttl)
			if err == nil {
				deadline := start.Add(ttl - c.opts.drift(ttl))
				if time.Now().Before(deadline) {
					cancel()
					return c.newMultiLease(mdctx, set, owner, tokens, ttl, deadline, ambiguous, keepAlive, began, attempt), nil
				}
				// Too late to use: let go of the set and try again.
				taken = set
				err = driver.Transient(fmt.Errorf("%w: %s: the acquire reply arrived after the leases' local deadline", ErrLost, label))
			}
			mayHold = addNames(mayHold, taken...)
		} else {
			_, err = q.grant(actx, waitFor, owner, ttl)
			if err == nil {
				// Our turn: waitFor is ours; try the whole set at once.
				mayHold = addNames(mayHold, waitFor)
				waitFor = ""
				cancel()
				r.result(ErrHeld) // an answer about the lock
				continue
			}
		}
		keep := keepLast(ctx, actx, last)
		cancel()
		if errors.Is(err, ErrInvalid) {
			return giveUp(err)
		}
		r.result(err)
		var held *driver.HeldError
		isHeld := errors.As(err, &held)
		if !isHeld && !errors.Is(err, ErrHeld) {
			ambiguous = true
		}
		if !driver.Retryable(err) && ctx.Err() == nil {
			return giveUp(permanent(label, attempt, err))
		}
		if keep {
			last = err
		}
		if ctx.Err() != nil || (maxAttempts > 0 && attempt >= maxAttempts) {
			return giveUp(notAcquired(ctx, label, attempt, last))
		}
		c.observe(Event{kind: eventRetrying, Name: set[0], Err: err, Attempt: attempt})
		if len(mayHold) > 0 {
			// Never wait holding a part of the set: let go of it first.
			if err := letGo(attempt); err != nil {
				return giveUp(err)
			}
		}
		if queued && isHeld && held.Name != "" && waitFor == "" && contains(set, held.Name) {
			waitFor = held.Name // get in line for it at once
			continue
		}
		if queued && waitFor != "" && (isHeld || errors.Is(err, ErrHeld)) {
			wait := place / 3
			if isHeld && held.TTL > 0 && held.TTL < wait {
				wait = held.TTL // first in line: wake when the holder's lease ends
			}
			if werr := c.driver.Await(ctx, c.claim(waitFor, owner), wait); werr != nil && ctx.Err() == nil {
				if !sleep(ctx, wait) {
					return giveUp(notAcquired(ctx, label, attempt, last))
				}
			}
			if ctx.Err() != nil {
				return giveUp(notAcquired(ctx, label, attempt, last))
			}
			continue
		}
		wait := c.backoff(attempt, last)
		if queued && waitFor != "" {
			wait = min(wait, place/3) // renew the place in time
		}
		if r.exceeded(wait) {
			return giveUp(unreachable(label, attempt, bound, last))
		}
		if !sleep(ctx, wait) {
			return giveUp(notAcquired(ctx, label, attempt, last))
		}
	}
}

func contains(set []string, name string) bool {
	for _, n := range set {
		if n == name {
			return true
		}
	}
	return false
}
