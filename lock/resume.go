package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Resumer is an optional capability of a Backend: adopting a live lease by
// its owner value in one atomic step. Client.Resume uses it when the backend
// has it (one round trip); otherwise it resumes through the base contract
// (Inspect, Extend, Inspect: three round trips, see Client.Resume), which is
// as exact but slower.
//
// Implementations must meet these obligations, in addition to Backend's,
// which the package [github.com/fencekit/fencekit/lock/locktest] checks
// (RunResume):
//
//   - Resume(name, owner, ttl), in one atomic step: if owner holds a live
//     lease on name, it must renew that lease to ttl from now, keep its
//     token and its holder metadata (as Extend does), and return the token.
//     Otherwise it must return an error matching ErrNotHeld and change
//     nothing: never re-create a lease that was released or expired, never
//     mint a token, never touch another owner's lease.
//   - Bad input (as Extend's: ValidateArgs) must be refused with an error
//     matching ErrInvalid before anything is sent.
//   - A failure that a retry may cure must be Retryable, as for Backend.
//     Resume is idempotent: a resend after a lost reply returns the same
//     token, so clients may resend it.
//
// Types that satisfy Resumer in this module: *memory.Backend,
// *redis.Backend, *postgres.Backend and *sqldb.Backend; in modules of their
// own, the etcd adapter's *etcd.Backend and the NATS adapter's
// *nats.Backend.
type Resumer interface {
	Backend
	// Resume renews owner's live lease on name to ttl from now and returns
	// its token.
	Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error)
}

// Resume adopts the live lease that owner holds on name, as a process that
// restarted (having saved Lease.Owner) or a worker handed a lease by another
// does: it renews the lease to ttl and returns a Lease with the same token,
// so that writes fenced with it are accepted where the earlier holder's
// were, and every write of a newer holder still fences them out. The lease
// is kept alive if Options.KeepAlive or WithKeepAlive says so, as for
// Acquire; Release, Extend and the local deadline work as for any lease.
// The holder metadata stored with the lease is kept, as Extend keeps it.
// The Observer gets EventAcquired for the resumed lease.
//
// When owner does not hold name (the lease was released, expired, or taken
// by another owner) Resume fails at once with an error matching ErrNotHeld
// and ErrNotAcquired, and changes nothing: it never re-creates a lease nor
// mints a token. Transient failures are retried with backoff as Acquire's
// are (a resend of the same owner gets the same token), bounded by ctx,
// Options.MaxAttempts and Options.MaxUnreachable; giving up returns an error
// matching ErrNotAcquired and the last attempt's error.
//
// On a Resumer backend Resume is one atomic request. On any other Backend it
// reads the holder (Inspect), renews (Extend) and reads it again, and adopts
// the lease only if both reads show owner with the same token: a token is
// never issued twice for a name, so the same token at both reads means the
// same lease lived throughout and the renewal in between renewed it. If owner
// took a new lease in between (another process using the same owner), the
// attempt is retried.
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
		return fence.Invalid("nil function")
	}
	lease, err := cc.resume(ctx, name, owner, ttl, keepAlive)
	if err != nil {
		return err
	}
	fnCtx, cancel := withLease(ctx, lease)
	return runLeased(ctx, lease, ttl, fnCtx, cancel, fn)
}

// errLeaseChanged is why a resume through the base contract is retried:
// owner's lease was replaced by a new one of the same owner between the two
// reads.
var errLeaseChanged = errors.New("lock: resume: the owner's lease changed while it was being resumed")

func (c *Client) resume(ctx context.Context, name, owner string, ttl time.Duration, keepAlive bool) (*Lease, error) {
	if err := ValidateArgs(name, owner, ttl); err != nil {
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
			err = Transient(fmt.Errorf("%w: %q: the resume reply arrived after the lease's local deadline", ErrLost, name))
		}
		if err == nil {
			l := newLease(c, name, owner, token, ttl, deadline)
			if ambiguous {
				l.mayLandLate(ttl)
			}
			l.emit(Event{Kind: EventAcquired, Name: name, Token: token, Attempt: attempt, Elapsed: time.Since(began)})
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
		if !Retryable(err) && ctx.Err() == nil {
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
		c.observe(Event{Kind: EventRetrying, Name: name, Err: err, Attempt: attempt})
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, notAcquired(ctx, name, attempt, last)
		case <-timer.C:
		}
	}
}

// resumeOnce makes one attempt: the backend's own Resume when it has one,
// otherwise Inspect, Extend, Inspect. It is waited for, as an acquire
// attempt is, so that no attempt of this call is still in flight when it
// returns.
func (c *Client) resumeOnce(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if r, ok := c.backend.(Resumer); ok {
		return r.Resume(ctx, name, owner, ttl)
	}
	return resumeThroughBase(ctx, c.backend, name, owner, ttl)
}

// resumeThroughBase resumes owner's lease on name with the base Backend
// contract alone: Inspect, Extend, Inspect. The two reads must show owner
// holding the same token. Tokens are never issued twice for a name (a lease
// taken again, even by the same owner, gets a new one: locktest's reuse
// checks), so the lease with that token was live from the first read to the
// second, and the Extend between them, which succeeded for owner, renewed
// that very lease to ttl.
func resumeThroughBase(ctx context.Context, b Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	before, err := b.Inspect(ctx, name)
	if err != nil {
		return 0, err
	}
	if !before.Held || before.Owner != owner {
		return 0, fmt.Errorf("%w: %q", ErrNotHeld, name)
	}
	if err := b.Extend(ctx, name, owner, ttl); err != nil {
		return 0, err
	}
	after, err := b.Inspect(ctx, name)
	if err != nil {
		return 0, err
	}
	if !after.Held || after.Owner != owner {
		return 0, fmt.Errorf("%w: %q", ErrNotHeld, name)
	}
	if after.Token != before.Token {
		return 0, Transient(fmt.Errorf("%w: %q: token %d, then %d", errLeaseChanged, name, before.Token, after.Token))
	}
	return after.Token, nil
}
