package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Lease is one acquisition of a lock: its name, its fencing token and a local
// deadline. It is safe for concurrent use.
//
// A Lease ends when it is released or lost. Lost means its local deadline
// passed without a successful renewal, the backend said the lease is no
// longer held, or a renewal failed in a way that cannot heal (an error for
// which Retryable is false). Either way Done is closed, Context is cancelled
// and Err says why (ErrReleased or ErrLost). An ended lease stays ended:
// nothing revives it.
type Lease struct {
	client *Client
	name   string
	owner  string
	token  fence.Token

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time   // local: monotonic, from before the request, minus drift
	timer    *time.Timer // fires at deadline
	ka       *keepAlive  // nil unless keep-alive runs
	ended    bool        // released or lost; set before ctx is cancelled

	releaseUnknown bool // the last Release failed with an unknown outcome

	metadata string // the holder metadata sent with the acquire, for events

	events     []Event // waiting for the Observer, in order
	delivering bool    // some goroutine is handing events to the Observer
}

func newLease(c *Client, name, owner string, token fence.Token, ttl time.Duration, deadline time.Time) *Lease {
	l := &Lease{client: c, name: name, owner: owner, token: token, ttl: ttl, deadline: deadline}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	// The callback takes l.mu before it touches l.timer, and it may run
	// before AfterFunc returns (a deadline that is about to pass): set the
	// field under the same lock so that it always sees it.
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(deadline), l.checkDeadline)
	l.mu.Unlock()
	return l
}

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the lease's fencing token. Pass it with every write the lock
// protects.
func (l *Lease) Token() fence.Token { return l.token }

// Owner returns the lease's owner value: 128 random bits in hex.
func (l *Lease) Owner() string { return l.owner }

// Deadline returns the local deadline: the lease is certainly valid until
// then, as long as clocks drift less than the margin. It moves forward with
// every successful renewal.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done returns a channel that is closed when the lease is released or lost.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Context returns a context that is cancelled when the lease is released or
// lost; context.Cause tells which (ErrReleased or an error matching ErrLost).
// It does not derive from the context given to Acquire; WithLease gives one
// that ends with either.
func (l *Lease) Context() context.Context { return l.ctx }

// Err returns nil while the lease is live, then the error that ended it: one
// matching ErrReleased or ErrLost.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Extend renews the lease for ttl from now. It returns nil only if the
// backend renewed the lease and its reply came back while the lease was
// still live and before its local deadline; only then does the deadline move
// and EventExtended reach the Observer. Otherwise:
//
//   - On an ended lease, or a reply that came too late (the lease ended
//     meanwhile, or its local deadline passed), the error matches ErrNotHeld
//     and the reason (ErrLost or ErrReleased); a late reply loses the lease.
//   - If the backend says the lease is no longer held, the lease is lost and
//     the error matches ErrNotHeld and ErrLost.
//   - If the renewal failed with an error for which Retryable is false (a
//     script error, a missing table), the lease is lost at once: such an
//     error will not heal before the deadline. The error matches ErrLost
//     and the cause.
//   - Any other failure (transient, or ctx ended) leaves the lease as it
//     was and is reported as EventRenewalFailed, unless ctx was cancelled.
//
// Extend returns by ctx's deadline even if the backend ignores it; the
// renewal's outcome is then unknown, and a reply that arrives later is
// discarded. A ttl that the Client's Options refuse (see
// Options.KeepAliveInterval) gets ErrInvalid and nothing is sent.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	l.mu.Lock()
	keepAlive := l.ka != nil
	l.mu.Unlock()
	if err := l.client.opts.checkTTL(ttl, keepAlive); err != nil {
		return err
	}
	start := time.Now()
	err := bounded(ctx, func(ctx context.Context) error {
		return l.client.backend.Extend(ctx, l.name, l.owner, ttl)
	})
	if err != nil {
		return l.renewalFailed(ctx, err)
	}
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
	}
	if !time.Now().Before(l.deadline) {
		// The deadline timer has not fired yet, but the lease was not
		// known to be valid for a while: it is lost, whatever the reply.
		l.mu.Unlock()
		lost := l.lose(errLateReply)
		return fmt.Errorf("%w: %w", ErrNotHeld, lost)
	}
	l.ttl = ttl
	l.deadline = start.Add(ttl - l.client.opts.drift(ttl))
	l.timer.Reset(time.Until(l.deadline))
	l.enqueue(Event{Kind: EventExtended, Name: l.name, Token: l.token})
	l.mu.Unlock()
	l.deliver()
	return nil
}

// renewalFailed decides what a failed renewal means for the lease.
func (l *Lease) renewalFailed(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrNotHeld):
		return l.lose(err)
	case ctx.Err() != nil || errors.Is(err, ErrInvalid):
		// The caller's context ended, or the input was refused: neither
		// says anything about the lease.
	case !Retryable(err):
		return l.lose(fmt.Errorf("renewal failed permanently: %w", err))
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		l.emit(Event{Kind: EventRenewalFailed, Name: l.name, Token: l.token, Err: err})
	}
	return err
}

// Release gives the lock up. It stops the keep-alive first, without waiting
// for a renewal in flight, whose late reply is discarded. Release returns by
// ctx's deadline even if the backend ignores it.
//
//   - Releasing a released lease returns nil.
//   - If the backend no longer holds the lease, the lease is lost and the
//     error matches ErrNotHeld and ErrLost.
//   - After any other error (a network failure, ctx ending) the outcome is
//     unknown, the lease stays as it was, and Release may be called again.
//     If the retry finds the lease no longer held, the first release may
//     have landed, or the lease may have expired meanwhile. It counts as
//     released (nil, and Err matches ErrReleased) only if the retry was
//     sent before the lease's local deadline, when the lease cannot have
//     expired on the server; after that, it is reported lost, as above.
func (l *Lease) Release(ctx context.Context) error {
	l.stopKeepAlive()
	if errors.Is(l.Err(), ErrReleased) {
		return nil
	}
	sent := time.Now()
	err := bounded(ctx, func(ctx context.Context) error {
		return l.client.backend.Release(ctx, l.name, l.owner)
	})
	notHeld := errors.Is(err, ErrNotHeld)
	l.mu.Lock()
	retried := l.releaseUnknown
	inTime := sent.Before(l.deadline)
	l.releaseUnknown = err != nil && !notHeld
	l.mu.Unlock()
	switch {
	case err == nil, notHeld && retried && inTime:
		// After a release whose reply was lost, "not held" before the
		// deadline means that first release landed.
		l.end(ErrReleased, Event{Kind: EventReleased, Name: l.name, Token: l.token})
		return nil
	case notHeld:
		return l.lose(err)
	}
	return err
}

// TTL asks the backend for the lease's remaining time to live. When the
// backend no longer holds it for this lease, the lease is lost and the error
// matches ErrNotHeld.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	info, err := l.client.backend.Inspect(ctx, l.name)
	if err != nil {
		return 0, err
	}
	if !info.Held || info.Owner != l.owner {
		err := fmt.Errorf("%w: %q", ErrNotHeld, l.name)
		l.lose(err)
		return 0, err
	}
	return info.TTL, nil
}

// Fenced returns a Writer that writes to store with this lease's token.
func (l *Lease) Fenced(store fence.Store) *Writer {
	return &Writer{lease: l, store: store}
}

// checkDeadline runs when the deadline timer fires. A renewal may have moved
// the deadline since the timer was set, so it checks again.
func (l *Lease) checkDeadline() {
	if timerHook != nil {
		timerHook(l)
	}
	l.mu.Lock()
	remaining := time.Until(l.deadline)
	if remaining > 0 {
		l.timer.Reset(remaining)
	}
	l.mu.Unlock()
	if remaining <= 0 {
		l.lose(errDeadlinePassed)
	}
}

// lose ends the lease as lost with cause, once, and returns an error that
// matches ErrLost and cause (whether or not this call ended the lease).
func (l *Lease) lose(cause error) error {
	err := fmt.Errorf("%w: %q: %w", ErrLost, l.name, cause)
	l.end(err, Event{Kind: EventLost, Name: l.name, Token: l.token, Err: err})
	return err
}

// end ends the lease with cause, once, and reports whether this call was the
// one that ended it. The observer hears of it before Done closes (unless an
// observer callback of this lease is running, see Options.Observer), so that
// whoever wakes on Done finds the event already delivered.
func (l *Lease) end(cause error, ev Event) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	l.timer.Stop()
	l.enqueue(ev)
	l.mu.Unlock()
	l.deliver()
	l.cancel(cause)
	return true
}
