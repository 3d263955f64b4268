package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Resume adopts the live lease that owner holds on name, as a process that
// restarted (having saved Lease.Owner) or a worker handed a lease by another
// does: it renews the lease to ttl and returns a Lease with the same token,
// so that writes fenced with it are accepted where the earlier holder's
// were, and every write of a newer holder still fences them out. The lease
// is kept alive if Options.KeepAlive or WithKeepAlive says so, as for
// Acquire; Release, Extend and the local deadline work as for any lease.
// The holder metadata stored with the lease is kept, as Extend keeps it.
// Observer.Acquired hears of the resumed lease.
//
// When owner does not hold name (the lease was released, expired, or taken
// by another owner) Resume fails at once with an error matching ErrNotHeld
// and ErrNotAcquired, and changes nothing: it never re-creates a lease nor
// mints a token. Transient failures are retried with backoff as Acquire's
// are (a resend of the same owner gets the same token), bounded by ctx,
// Options.MaxAttempts and Options.MaxUnreachable; giving up returns an error
// matching ErrNotAcquired and the last attempt's error.
//
// Resume is one atomic request to the backend (one round trip on every
// shipped backend).
//
// Bad input (an empty or malformed name or owner, a ttl the Options refuse,
// an invalid option) gets ErrInvalid and nothing is sent.
func (c *Client) Resume(ctx context.Context, name, owner string, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	cc, keepAlive, err := c.forCall(false, opts)
	if err != nil {
		return nil, err
	}
	return cc.resume(ctx, name, owner, ttl, keepAlive)
}

// ResumeDo is Do for a lease that owner already holds: it resumes it (as
// Resume), keeps it alive (unless WithKeepAlive(false) is among opts), runs
// fn with a context that ends when ctx ends or the lease ends, and releases
// the lease when fn is done, on every exit path, exactly as Do does. When
// the lease cannot be resumed it returns Resume's error (matching ErrNotHeld
// when owner no longer holds name) and fn is not run.
func (c *Client) ResumeDo(ctx context.Context, name, owner string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...CallOption) error {
	cc, keepAlive, err := c.forCall(true, opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return driver.Invalid("nil function")
	}
	lease, err := cc.resume(ctx, name, owner, ttl, keepAlive)
	if err != nil {
		return err
	}
	fnCtx, cancel := withLease(ctx, lease)
	return runLeased(ctx, lease, ttl, fnCtx, cancel, fn)
}

func (c *Client) resume(ctx context.Context, name, owner string, ttl time.Duration, keepAlive bool) (*Lease, error) {
	if err := c.check(name, owner, ttl, false); err != nil {
		return nil, err
	}
	if err := c.opts.checkTTL(ttl, keepAlive); err != nil {
		return nil, err
	}
	var (
		last      error
		ambiguous bool // an attempt may have renewed the lease without our knowing
	)
	began := time.Now()
	bound := c.opts.unreachableBound()
	r := newReach(bound)
	for attempt := 1; ; attempt++ {
		actx, cancel := r.attempt(ctx)
		start := time.Now() // before the request: the renewal cannot have landed earlier
		token, err := c.resumeOnce(actx, name, owner, ttl)
		keep := keepLast(ctx, actx, last)
		cancel()
		deadline := start.Add(ttl - c.opts.drift(ttl))
		if err == nil && !time.Now().Before(deadline) {
			err = driver.Transient(fmt.Errorf("%w: %q: the resume reply arrived after the lease's local deadline", ErrLost, name))
		}
		if err == nil {
			l := newLease(ctx, c, name, owner, token, ttl, deadline)
			if ambiguous {
				l.mayLandLate(ttl)
			}
			l.emit(Event{kind: eventAcquired, Name: name, Token: token, Attempt: attempt, Elapsed: time.Since(began)})
			if keepAlive {
				l.startKeepAlive()
			}
			return l, nil
		}
		switch {
		case errors.Is(err, ErrInvalid):
			return nil, err
		case errors.Is(err, ErrNotHeld):
			return nil, fmt.Errorf("%w: resume %q: %w", ErrNotAcquired, name, err)
		}
		ambiguous = true
		if !driver.Retryable(err) && ctx.Err() == nil {
			return nil, permanent(name, attempt, err)
		}
		if keep {
			last = err
		}
		if ctx.Err() != nil || (c.opts.MaxAttempts > 0 && attempt >= c.opts.MaxAttempts) {
			return nil, notAcquired(ctx, name, attempt, last)
		}
		wait := c.backoff(attempt, last)
		if r.exceeded(wait) {
			return nil, unreachable(name, attempt, bound, last)
		}
		c.observe(Event{kind: eventRetrying, Name: name, Err: err, Attempt: attempt})
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, notAcquired(ctx, name, attempt, last)
		case <-timer.C:
		}
	}
}

// resumeOnce makes one attempt. It is waited for, as an acquire attempt
// is, so that no attempt of this call is still in flight when it returns.
func (c *Client) resumeOnce(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := c.driver.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Resume: true})
	return g.Token, err
}
