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
// passed without a successful renewal, or the backend said the lease is no
// longer held. Either way Done is closed, Context is cancelled and Err says
// why (ErrReleased or ErrLost).
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
// It does not derive from the context given to Acquire.
func (l *Lease) Context() context.Context { return l.ctx }

// Err returns nil while the lease is live, then the error that ended it: one
// matching ErrReleased or ErrLost.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Extend renews the lease for ttl from now. If the backend says the lease is
// no longer held, the lease is lost and the error matches ErrNotHeld.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	start := time.Now()
	if err := l.client.backend.Extend(ctx, l.name, l.owner, ttl); err != nil {
		if errors.Is(err, ErrNotHeld) {
			l.lose(err)
		}
		return err
	}
	l.mu.Lock()
	if !l.ended {
		l.ttl = ttl
		l.deadline = start.Add(ttl - l.client.opts.drift(ttl))
		l.timer.Reset(time.Until(l.deadline))
	}
	l.mu.Unlock()
	l.client.observe(Event{Kind: EventExtended, Name: l.name, Token: l.token})
	return nil
}

// Release gives the lock up. It stops the keep-alive first. Releasing a lease
// twice returns nil; releasing a lease that the backend no longer holds
// returns an error matching ErrNotHeld. After any other error (a network
// failure, say) the outcome is unknown, the lease stays as it was, and
// Release may be called again; if the retry finds the lock no longer held
// by this lease, it counts as released and returns nil.
func (l *Lease) Release(ctx context.Context) error {
	l.stopKeepAlive()
	if errors.Is(l.Err(), ErrReleased) {
		return nil
	}
	err := l.client.backend.Release(ctx, l.name, l.owner)
	l.mu.Lock()
	retried := l.releaseUnknown
	l.releaseUnknown = err != nil && !errors.Is(err, ErrNotHeld)
	l.mu.Unlock()
	switch {
	case err == nil, errors.Is(err, ErrNotHeld) && retried:
		// After a release whose reply was lost, "not held" most likely
		// means that first release landed: either way the lock is not
		// ours, which is what the caller asked for.
		l.end(ErrReleased, Event{Kind: EventReleased, Name: l.name, Token: l.token})
		return nil
	case errors.Is(err, ErrNotHeld):
		l.lose(err)
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

// Fenced returns a view of store whose writes carry this lease's token.
func (l *Lease) Fenced(store fence.Store) *Writer {
	return &Writer{lease: l, store: store}
}

// checkDeadline runs when the deadline timer fires. A renewal may have moved
// the deadline since the timer was set, so it checks again.
func (l *Lease) checkDeadline() {
	l.mu.Lock()
	remaining := time.Until(l.deadline)
	if remaining > 0 {
		l.timer.Reset(remaining)
	}
	l.mu.Unlock()
	if remaining <= 0 {
		l.lose(errors.New("local deadline passed without a successful renewal"))
	}
}

// lose ends the lease as lost with cause, once.
func (l *Lease) lose(cause error) {
	err := fmt.Errorf("%w: %q: %w", ErrLost, l.name, cause)
	l.end(err, Event{Kind: EventLost, Name: l.name, Token: l.token, Err: err})
}

// end ends the lease with cause, once, and reports whether this call was the
// one that ended it. The observer hears of it before Done closes, so that
// whoever wakes on Done finds the event already delivered.
func (l *Lease) end(cause error, ev Event) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	l.timer.Stop()
	l.mu.Unlock()
	l.client.observe(ev)
	l.cancel(cause)
	return true
}
