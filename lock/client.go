package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// Client acquires leases from a Backend. It is safe for concurrent use.
type Client struct {
	driver driver.Backend
	opts   Options
	// What this Client asks the driver for (see backend.go): a New Client
	// asks for exclusive locks without a place in line; Semaphore, RWLock
	// and a queued Acquire use copies that ask for more.
	kind  driver.Kind
	limit int
	place time.Duration
}

// New returns a Client over backend, one of the adapters (adapters/memory,
// adapters/redis, adapters/postgres, adapters/sqldb, adapters/etcd,
// adapters/nats) or a wrapper around one. A nil opts means the defaults. A
// Client with a nil backend refuses every call with an error matching
// ErrInvalid.
func New(backend driver.Backend, opts *Options) *Client {
	return &Client{driver: backend, opts: opts.withDefaults(), kind: driver.Exclusive}
}

// NewOwner returns a fresh owner value: 128 bits from crypto/rand, in hex.
// Every lease a Client acquires gets its own.
func NewOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lock: owner from crypto/rand: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// TryAcquire makes one attempt to acquire the lock name for ttl. When another
// owner holds it, the error matches both ErrNotAcquired and ErrHeld; when the
// attempt failed otherwise, ErrNotAcquired and the attempt's error. Its ttl
// and opts are checked as Acquire's; it makes one attempt whatever
// WithMaxAttempts says.
//
// TryAcquire does not queue, and it may take a free lock ahead of waiters in line: the
// lock is free only in the moment between a release and the first waiter's
// arrival, so that barging costs a waiter at most one turn, while refusing
// would make TryAcquire read the queue (one more step on every uncontended
// call) and fail on a lock that nobody holds. An Acquire limited to one
// attempt does the same.
func (c *Client) TryAcquire(ctx context.Context, name string, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	cc, keepAlive, err := c.forCall(false, opts)
	if err != nil {
		return nil, err
	}
	return cc.acquire(ctx, name, ttl, 1, keepAlive)
}

// Acquire blocks until it acquires the lock name for ttl. It waits in line:
// it is served after the waiters that arrived before it and woken when the
// lock is released or its holder's lease expires (see QueueOptions); every
// request counts as an attempt. With QueueOptions.Polling it retries with
// exponential backoff and full jitter instead. It retries only while the
// lock is held by another owner or an attempt failed transiently, and
// reports each retry to Observer.Retrying. It gives up with an
// error matching ErrNotAcquired and the last attempt's error:
//
//   - at once on an error that a retry cannot cure (a missing table, a
//     failed authentication), even with context.Background;
//   - when ctx ends (the error also matches ctx.Err());
//   - after Options.MaxAttempts attempts (or WithMaxAttempts's);
//   - when the backend has been unreachable for Options.MaxUnreachable (a
//     minute by default, or WithMaxUnreachable's): attempts in a row got
//     no answer about the lock (neither the lock nor ErrHeld), and the
//     first of them began that long ago, so that the next would begin
//     after it. The error then matches ErrUnreachable too. A connection refused, reset or timed out, and a
//     transient reply such as Redis LOADING, are not answers about the
//     lock; waiting for a holder (ErrHeld) is never cut short by this
//     bound, under context.Background it lasts until the holder lets go.
//     An attempt still in flight when the bound passes is cancelled.
//
// Every attempt uses the same owner, so an attempt whose reply was lost is
// recovered by the next one, which gets the same token; if Acquire gives up
// after such an attempt, it releases what that attempt may have taken.
//
// The lease is kept alive if Options.KeepAlive says so, or WithKeepAlive
// for this call; opts override the Client's Options for this call only (see
// CallOption). A ttl that the Options refuse (not longer than the drift
// margin, or, with keep-alive, too short for a renewal before the local
// deadline) or an invalid option gets ErrInvalid and nothing is sent.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	cc, keepAlive, err := c.forCall(false, opts)
	if err != nil {
		return nil, err
	}
	return cc.acquire(ctx, name, ttl, cc.opts.MaxAttempts, keepAlive)
}

func (c *Client) acquire(ctx context.Context, name string, ttl time.Duration, maxAttempts int, keepAlive bool) (*Lease, error) {
	owner, err := NewOwner()
	if err != nil {
		return nil, err
	}
	queued := c.queued(maxAttempts)
	if err := c.check(name, owner, ttl, queued); err != nil {
		return nil, err
	}
	if err := c.opts.checkTTL(ttl, keepAlive); err != nil {
		return nil, err
	}
	if _, err := c.metadataContext(ctx); err != nil {
		// Refused before anything is sent: a queued Acquire would
		// otherwise send a Leave when its first attempt is refused.
		return nil, err
	}
	if queued { // queued waiting: lock/queue.go
		return c.acquireQueued(ctx, name, owner, ttl, maxAttempts, keepAlive)
	}
	var (
		last      error
		ambiguous bool // an attempt may have taken the lock without our knowing
	)
	giveUp := func(attempts int) (*Lease, error) {
		if ambiguous {
			c.abandon(ctx, name, owner, ttl)
		}
		return nil, notAcquired(ctx, name, attempts, last)
	}
	began := time.Now()
	bound := c.opts.unreachableBound()
	r := newReach(bound)
	for attempt := 1; ; attempt++ {
		actx, cancel := r.attempt(ctx)
		lease, err := c.attempt(actx, name, owner, ttl, keepAlive, began, attempt)
		keep := keepLast(ctx, actx, last)
		cancel()
		if err == nil {
			if ambiguous {
				lease.mayLandLate(ttl) // an earlier attempt may still land: see Lease.Extend
			}
			return lease, nil
		}
		if errors.Is(err, ErrInvalid) {
			return nil, err
		}
		r.result(err)
		if !errors.Is(err, ErrHeld) {
			ambiguous = true
		}
		if !driver.Retryable(err) && ctx.Err() == nil {
			if ambiguous {
				c.abandon(ctx, name, owner, ttl)
			}
			return nil, permanent(name, attempt, err)
		}
		if keep {
			last = err
		}
		if ctx.Err() != nil || (maxAttempts > 0 && attempt >= maxAttempts) {
			return giveUp(attempt)
		}
		wait := c.backoff(attempt, last)
		if r.exceeded(wait) {
			// The next attempt would start after the bound: the backend
			// has not answered for that long.
			if ambiguous {
				c.abandon(ctx, name, owner, ttl)
			}
			return nil, unreachable(name, attempt, bound, last)
		}
		c.observe(Event{kind: eventRetrying, Name: name, Err: err, Attempt: attempt})
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return giveUp(attempt)
		case <-timer.C:
		}
	}
}

// usable refuses a nil Client or one without a backend.
func (c *Client) usable() error {
	if c == nil || c.driver == nil {
		return driver.Invalid("nil client or backend")
	}
	return nil
}

// attempt makes one acquire request and wraps its result in a Lease.
// began is when the acquiring call began and n the attempt's number, for
// the Acquired event.
func (c *Client) attempt(ctx context.Context, name, owner string, ttl time.Duration, keepAlive bool, began time.Time, n int) (*Lease, error) {
	mdctx, err := c.metadataContext(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now() // before the request: the lease cannot have started earlier
	g, err := c.grant(mdctx, name, owner, ttl)
	if err != nil {
		return nil, err
	}
	token := g.Token
	deadline := start.Add(ttl - c.opts.drift(ttl))
	if !time.Now().Before(deadline) {
		// The reply came too late to use: the lease may already have
		// expired on the server. The next attempt (same owner) extends it.
		return nil, driver.Transient(fmt.Errorf("%w: %q: the acquire reply arrived after the lease's local deadline", ErrLost, name))
	}
	l := newLease(ctx, c, name, owner, token, ttl, deadline)
	l.priorWriter = g.PriorWriter
	l.mu.Lock()
	l.metadata = metadataFromContext(mdctx)
	l.mu.Unlock()
	l.emit(Event{kind: eventAcquired, Name: name, Token: token, Attempt: n, Elapsed: time.Since(began)})
	if keepAlive {
		l.startKeepAlive()
	}
	return l, nil
}

// abandon releases a lock that an ambiguous attempt may have taken, so that
// giving up does not leave it held until its TTL ends. Best effort, and
// bounded by ttl even if the backend ignores its context.
//
// Every attempt has returned by the time abandon runs (attempts are not run
// in the background), so no attempt of this Client can land after it. The
// bound that remains is the backend's: a request that its client gave up on
// when the context ended may still reach the server after this release. The
// lease it creates then belongs to an owner nobody uses, and blocks the lock
// for at most ttl.
func (c *Client) abandon(ctx context.Context, name, owner string, ttl time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	_ = bounded(rctx, func(ctx context.Context) error { return c.release(ctx, name, owner) })
}

// backoff returns the pause before the next attempt: a uniformly random
// duration up to a ceiling that doubles with every attempt (full jitter),
// and never longer than the holder's remaining TTL when that is known.
func (c *Client) backoff(attempt int, last error) time.Duration {
	ceiling := c.opts.MaxBackoff
	if attempt < 32 {
		if d := c.opts.MinBackoff << (attempt - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	wait := time.Duration(jitter(c, int64(ceiling))) + 1
	var held *driver.HeldError
	if errors.As(last, &held) && held.TTL > 0 && wait > held.TTL {
		wait = held.TTL
	}
	return wait
}

// unreachable is the error Acquire returns when no attempt reached the
// backend for bound.
func unreachable(name string, attempts int, bound time.Duration, last error) error {
	return fmt.Errorf("%w: %q after %d attempt(s): %w: no answer about the lock for %v (Options.MaxUnreachable): %w",
		ErrNotAcquired, name, attempts, ErrUnreachable, bound, last)
}

func notAcquired(ctx context.Context, name string, attempts int, last error) error {
	err := fmt.Errorf("%w: %q after %d attempt(s): %w", ErrNotAcquired, name, attempts, last)
	if ctx.Err() != nil {
		return errors.Join(err, ctx.Err())
	}
	return err
}

// observe hands e to the Observer's field for its kind, if set: the one
// place the Observer is called.
func (c *Client) observe(e Event) {
	if e.Metadata == "" {
		e.Metadata = c.opts.Metadata
	}
	if f := c.opts.Observer.hook(e.kind); f != nil {
		f(e)
	}
}
