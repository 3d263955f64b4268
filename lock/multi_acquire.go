package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// TryAcquireMulti makes one attempt to acquire every lock in names for ttl,
// all or nothing. Each name gets its own lease and its own fencing token,
// greater than every earlier token for that name (MultiLease.Token); one
// owner value holds them all. When another owner holds one of them, the
// error matches ErrNotAcquired and ErrHeld (a *HeldError names that lock)
// and the caller holds none of them.
//
// On a MultiBackend that can take this set in one step, that is one round
// trip, and no other caller ever sees a part of the set taken. On any other
// Backend the names are taken one by one in sorted order; when one is busy
// (or an attempt fails) the names already taken are released again, in
// reverse order, before TryAcquireMulti returns, so that another caller may
// see a part of the set held for the length of that pass but never for
// longer. names may come in any order; an empty set, more than
// MaxMultiNames names, a name given twice, or an invalid name gets
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
// waits for that name alone: in line on a backend with queued waiting
// (QueueBackend, unless QueueOptions.Polling), where its turn takes that name
// for it, or with backoff and full jitter otherwise; then it tries the whole
// set again, its own names included (a same-owner acquire keeps their
// tokens). Every request counts as an attempt, and it gives up as Acquire
// does (the context, Options.MaxAttempts, Options.MaxUnreachable, an error
// for which Retryable is false), with an error matching ErrNotAcquired,
// releasing everything it may hold and leaving the queue.
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
	q, queued := c.queue(maxAttempts)
	place := c.opts.Queue.placeTTL()
	if queued {
		if err := ValidatePlace(set[0], owner, ttl, place); err != nil {
			return nil, err
		}
	}
	label := fmt.Sprintf("%q", set)

	var (
		last      error
		ambiguous bool   // an attempt may have left a name held without our knowing
		waitFor   string // the busy name this caller waits in line for, "" when none
		turn      string // the name its turn in line took for it, "" when none
	)
	giveUp := func(err error) (*MultiLease, error) {
		if waitFor != "" {
			c.leaveQueue(mdctx, q, waitFor, owner, place)
		}
		switch {
		case ambiguous:
			c.abandonAll(mdctx, set, owner, ttl)
		case turn != "":
			c.abandon(mdctx, turn, owner, ttl)
		}
		return nil, err
	}
	began := time.Now()
	bound := c.opts.unreachableBound()
	r := newReach(bound)
	for attempt := 1; ; attempt++ {
		actx, cancel := r.attempt(mdctx)
		var err error
		if waitFor == "" {
			start := time.Now() // before the request: no lease of the set began earlier
			var tokens []fence.Token
			tokens, err = c.tryMulti(actx, set, owner, ttl)
			if err == nil {
				deadline := start.Add(ttl - c.opts.drift(ttl))
				if time.Now().Before(deadline) {
					cancel()
					return c.newMultiLease(mdctx, set, owner, tokens, ttl, deadline, ambiguous, keepAlive, began, attempt), nil
				}
				// Too late to use: let go of the set and try again.
				c.abandonAll(mdctx, set, owner, ttl)
				err = Transient(fmt.Errorf("%w: %s: the acquire reply arrived after the leases' local deadline", ErrLost, label))
			} else if turn != "" && errors.Is(err, ErrHeld) {
				// Another name is busy: let go of the one our turn took,
				// so as not to hold it while waiting.
				c.abandon(mdctx, turn, owner, ttl)
			}
			turn = ""
		} else {
			_, err = q.AcquireOrEnqueue(actx, waitFor, owner, ttl, place)
			if err == nil {
				// Our turn: waitFor is ours; try the whole set at once.
				turn, waitFor = waitFor, ""
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
		var held *HeldError
		isHeld := errors.As(err, &held)
		if !isHeld && !errors.Is(err, ErrHeld) {
			ambiguous = true
		}
		if !Retryable(err) && ctx.Err() == nil {
			return giveUp(permanent(label, attempt, err))
		}
		if keep {
			last = err
		}
		if ctx.Err() != nil || (maxAttempts > 0 && attempt >= maxAttempts) {
			return giveUp(notAcquired(ctx, label, attempt, last))
		}
		c.observe(Event{Kind: EventRetrying, Name: set[0], Err: err, Attempt: attempt})
		if queued && isHeld && held.Name != "" && waitFor == "" && contains(set, held.Name) {
			waitFor = held.Name // get in line for it at once
			continue
		}
		if queued && waitFor != "" && (isHeld || errors.Is(err, ErrHeld)) {
			wait := place / 3
			if isHeld && held.TTL > 0 && held.TTL < wait {
				wait = held.TTL // first in line: wake when the holder's lease ends
			}
			if werr := q.AwaitTurn(ctx, waitFor, owner, wait); werr != nil && ctx.Err() == nil {
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
