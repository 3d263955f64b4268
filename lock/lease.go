package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Lease is one acquisition of a lock: its name, its fencing token and a local
// deadline. It is safe for concurrent use.
//
// A Lease ends when it is released or lost. Lost means its local deadline
// passed without a successful renewal, the backend said the lease is no
// longer held, or a renewal failed in a way that a retry cannot cure. Either way Done is closed, Context is cancelled
// and Err says why (ErrReleased or ErrLost). An ended lease stays ended:
// nothing revives it.
//
// The local deadline never lies past the backend's own expiry of the lease,
// whatever the order in which renewals land and answer (see Extend). Err,
// Done and Context look at the deadline themselves, so they are right at
// once after the process was paused past it, before the deadline timer has
// had a chance to run.
//
// An Observer that panics on the event that ends the lease does not keep
// Done open: Done closes, and the panic goes on in the goroutine that ended
// the lease (the caller of Release, Extend, Err or Done; in the deadline
// timer's or the keep-alive's own goroutine it ends the program, as any
// unrecovered panic does).
type Lease struct {
	client *Client
	name   string
	owner  string
	token  fence.Token
	// priorWriter is, for a permit of a read-write lock, the token of the
	// newest writer granted before it (see PriorWriter). Set before the
	// lease is handed out, never changed.
	priorWriter fence.Token

	ctx    context.Context
	cancel context.CancelCauseFunc

	lctx leaseContext // what Context returns: a field, so that it costs no allocation
	// values is the acquiring context without its cancellation (as
	// context.WithoutCancel, but a field: no allocation), the parent of ctx.
	values valuesOnly

	// renewing holds a token while a renewal is in flight: renewals of
	// one lease are sent one at a time, so that their replies cannot come
	// back in another order than the server applied them. Made by the
	// first renewal (see renewalSlot): a lease that is never renewed
	// allocates none.
	renewing chan struct{}

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time   // local: monotonic, from before the request, minus drift
	timer    *time.Timer // fires at deadline
	ka       *keepAlive  // nil unless keep-alive runs
	cause    error       // why it ended, set with ended
	// unknownTTL is the shortest TTL of a renewal whose outcome was
	// unknown (0 if none): its request may still land after any later
	// renewal, so no later deadline may count on more than that.
	unknownTTL time.Duration

	metadata string // the holder metadata sent with the acquire, for events

	events []Event // waiting for the Observer, in order

	// The flags sit together so that they share one word: apart, each
	// took a word of padding, and the Lease (one allocation per
	// acquisition) went from 256 to 272 bytes, into the 288-byte size
	// class, when values was added (TestLeaseSize).
	ended          bool // released or lost; set before ctx is cancelled
	releaseUnknown bool // the last Release failed with an unknown outcome
	delivering     bool // some goroutine is handing events to the Observer
}

// newLease wraps a granted token. parent is the context the lease was
// acquired with: the lease's own context keeps its values (not its
// cancellation), so that the keep-alive's renewals and the release after a
// lost context carry them, and a tracer on the caller's client records them
// under the caller's trace.
func newLease(parent context.Context, c *Client, name, owner string, token fence.Token, ttl time.Duration, deadline time.Time) *Lease {
	l := &Lease{client: c, name: name, owner: owner, token: token, ttl: ttl, deadline: deadline}
	l.values.parent = parent
	l.ctx, l.cancel = context.WithCancelCause(&l.values)
	l.lctx = leaseContext{l.ctx, l}
	// The callback takes l.mu before it touches l.timer, and it may run
	// before AfterFunc returns (a deadline that is about to pass): set the
	// field under the same lock so that it always sees it.
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(deadline), l.checkDeadline)
	l.mu.Unlock()
	return l
}

// valuesOnly is a context that has its parent's values and nothing else:
// no deadline, never done.
type valuesOnly struct{ parent context.Context }

func (valuesOnly) Deadline() (time.Time, bool) { return time.Time{}, false }
func (valuesOnly) Done() <-chan struct{}       { return nil }
func (valuesOnly) Err() error                  { return nil }
func (v *valuesOnly) Value(key any) any        { return v.parent.Value(key) }
func (v *valuesOnly) String() string           { return "lock.Lease values" }

// Name returns the lock's name.
func (l *Lease) Name() string { return l.name }

// Token returns the lease's fencing token. Pass it with every write the lock
// protects.
func (l *Lease) Token() fence.Token { return l.token }

// PriorWriter returns, for a lease of a read-write lock (RWLock), the
// token of the newest write lease granted on the lock before this one: 0
// when there was none, and always 0 for other leases.
func (l *Lease) PriorWriter() fence.Token { return l.priorWriter }

// ReadFence returns, for a read permit of a read-write lock, the fence its
// Writer's Advance raises a key to: PriorWriter + 1. That is above every
// writer granted before the reader, so a writer that paused past its TTL is
// refused from then on, and at or below every writer granted after it
// (their tokens are above the reader's own), so they are not. Readers that
// follow the same writer share it, so they do not refuse one another.
//
// A reader advances a key, reads it, and before it acts on what it read
// gets the key's fence again: a fence above ReadFence means a newer writer
// has written since (see RWLock). For any other lease, ReadFence is Token.
func (l *Lease) ReadFence() fence.Token {
	if l.client.kind == driver.Read {
		return l.priorWriter + 1
	}
	return l.token
}

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
// Like Err, it first looks at the deadline: if it has passed, the lease is
// lost and the channel returned is already closed.
func (l *Lease) Done() <-chan struct{} {
	l.Err()
	return l.ctx.Done()
}

// Context returns a context that is cancelled when the lease is released or
// lost; context.Cause tells which (ErrReleased or an error matching ErrLost).
// Its Err and Done look at the deadline first, as Lease.Err does; a context
// derived from it ends when the lease's deadline timer runs (at once,
// normally; after a pause, as soon as the process runs again). It does not
// derive from the context given to Acquire; WithLease gives one that ends
// with either.
func (l *Lease) Context() context.Context { return &l.lctx }

// leaseContext is the lease's context as Context gives it out.
type leaseContext struct {
	context.Context // the lease's own, cancelled when it ends
	lease           *Lease
}

func (c *leaseContext) Done() <-chan struct{} { return c.lease.Done() }

func (c *leaseContext) Err() error {
	c.lease.Err()
	return c.Context.Err()
}

// Err returns nil while the lease is live, then the error that ended it: one
// matching ErrReleased or ErrLost. It looks at the local deadline itself:
// once it has passed, Err loses the lease (the Observer hears Lost
// from the calling goroutine) and says so, even if the deadline timer has
// not run yet, as after a pause of the process.
func (l *Lease) Err() error {
	l.mu.Lock()
	ended, cause := l.ended, l.cause
	passed := !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if ended {
		return cause
	}
	if !passed || (brokenBuild && broken.keepAliveNeverLoses) {
		return nil
	}
	l.lose(errDeadlinePassed)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Extend renews the lease for ttl from now. It returns nil only if the
// backend renewed the lease and its reply came back while the lease was
// still live and before its local deadline; only then does the deadline move
// and Observer.Extended hear of it.
//
// The deadline never counts on more than the server may have: renewals of
// one lease (Extend calls and the keep-alive's) are sent one at a time, a
// call waiting for the renewal in flight to be answered (or given up on)
// before it sends its own, or returning when ctx ends first. From the moment
// a renewal is sent, the deadline is no later than the one it would set, for
// it may land: a shorter TTL shortens the lease at once. And a renewal whose
// outcome stays unknown may land later still, after renewals sent after it
// (as may an acquire attempt whose outcome Acquire did not learn before a
// later attempt took the lease), so from then on no renewal sets the
// deadline more than that TTL (minus the drift margin) after its start.
//
// Otherwise:
//
//   - On an ended lease, or a reply that came too late (the lease ended
//     meanwhile, or its local deadline passed), the error matches ErrNotHeld
//     and the reason (ErrLost or ErrReleased); a late reply loses the lease.
//   - If the backend says the lease is no longer held, the lease is lost and
//     the error matches ErrNotHeld and ErrLost.
//   - If the renewal failed with an error that a retry cannot cure (a
//     script error, a missing table), the lease is lost at once: such an
//     error will not heal before the deadline. The error matches ErrLost
//     and the cause.
//   - Any other failure (transient, or ctx ended) leaves the lease live and
//     is reported to Observer.RenewalFailed, unless ctx was cancelled. The
//     renewal may have landed, so the deadline stays the earlier of the old
//     one and the one it would have set (see below).
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
	slot := l.renewalSlot()
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		// Nothing was sent: the lease is as it was.
		err := fmt.Errorf("lock: renewal not sent, another was in flight until the context ended: %w", context.Cause(ctx))
		if !errors.Is(ctx.Err(), context.Canceled) {
			l.emit(Event{kind: eventRenewalFailed, Name: l.name, Token: l.token, Err: err})
		}
		return err
	}
	defer func() { <-slot }()
	if err := l.Err(); err != nil { // it ended while this call waited
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	start := time.Now()
	// From the moment it is sent, the renewal may land: a shorter TTL may
	// end the server's lease before the current deadline.
	l.mu.Lock()
	if d := start.Add(l.life(ttl)); d.Before(l.deadline) && !(brokenBuild && broken.shorterExtendLater) {
		l.deadline = d
		l.timer.Reset(time.Until(d))
	}
	l.mu.Unlock()
	err := bounded(ctx, func(ctx context.Context) error {
		return l.client.driver.Extend(ctx, l.client.claim(l.name, l.owner), ttl)
	})
	if brokenBuild && broken.deadlineAfterReply {
		start = time.Now()
	}
	if err != nil {
		return l.renewalFailed(ctx, err, ttl)
	}
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrNotHeld, l.Err())
	}
	if !time.Now().Before(l.deadline) && !(brokenBuild && broken.lateExtendAccepted) {
		// The deadline timer has not fired yet, but the lease was not
		// known to be valid for a while: it is lost, whatever the reply.
		l.mu.Unlock()
		lost := l.lose(errLateReply)
		return fmt.Errorf("%w: %w", ErrNotHeld, lost)
	}
	l.ttl = ttl
	l.deadline = start.Add(l.life(ttl))
	l.timer.Reset(time.Until(l.deadline))
	l.enqueue(Event{kind: eventExtended, Name: l.name, Token: l.token})
	l.mu.Unlock()
	l.deliver()
	return nil
}

// renewalSlot returns the lease's renewing channel, made on first use.
func (l *Lease) renewalSlot() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewing == nil {
		l.renewing = make(chan struct{}, 1)
	}
	return l.renewing
}

// life is how long after a renewal's start, sent with ttl, the lease is
// certainly still held: ttl, or less if a renewal with a shorter TTL may
// still land (unknownTTL), minus the drift margin. The caller holds l.mu.
func (l *Lease) life(ttl time.Duration) time.Duration {
	if l.unknownTTL > 0 && l.unknownTTL < ttl {
		ttl = l.unknownTTL
	}
	return ttl - l.client.opts.drift(ttl)
}

// mayLandLate records that a request for the lease with ttl, whose outcome
// is unknown, may still land on the server: a renewal that failed that way,
// or an acquire attempt before the one that made the lease. Landing, it sets
// the server's lease to ttl from then, so no later renewal counts on more.
func (l *Lease) mayLandLate(ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unknownTTL == 0 || ttl < l.unknownTTL {
		l.unknownTTL = ttl
	}
}

// renewalFailed decides what a failed renewal, sent with ttl, means for the
// lease.
func (l *Lease) renewalFailed(ctx context.Context, err error, ttl time.Duration) error {
	switch {
	case errors.Is(err, ErrInvalid):
		// Refused before anything was sent: it says nothing about the
		// lease.
	case errors.Is(err, ErrNotHeld) && !(brokenBuild && broken.keepAliveNeverLoses):
		return l.lose(err)
	case ctx.Err() == nil && !driver.Retryable(err) && !(brokenBuild && broken.keepAliveNeverLoses):
		return l.lose(fmt.Errorf("renewal failed permanently: %w", err))
	default:
		// The outcome is unknown (the context ended, or a transient
		// failure that may come after the server applied it): the
		// renewal may have landed, or may land later. Extend already
		// moved the deadline to the earlier of the two when it sent it.
		l.mayLandLate(ttl)
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		l.emit(Event{kind: eventRenewalFailed, Name: l.name, Token: l.token, Err: err})
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
//     Its Err stays nil until then (or until the deadline), although the
//     lock may already be free on the server: do no more work under a
//     lease once Release was called.
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
		return l.client.release(ctx, l.name, l.owner)
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
		l.end(ErrReleased, Event{kind: eventReleased, Name: l.name, Token: l.token})
		return nil
	case notHeld:
		return l.lose(err)
	}
	return err
}

// TTL asks the backend for the lease's remaining time to live. When the
// backend no longer holds it for this lease, the lease is lost and the error
// matches ErrNotHeld. It is the backend's count: on a backend that rounds
// TTLs up (NATS keeps whole seconds), it can be above the TTL asked for,
// while Deadline stays on the TTL asked for.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	info, err := l.client.driver.Inspect(ctx, l.name, l.client.kind)
	if err != nil {
		return 0, err
	}
	// Only this lease's own entry counts: the same owner and the same
	// token. A newer holder's TTL, even under the same owner value (a
	// resume, a reuse), says nothing of this lease.
	for _, h := range info.Holders {
		if h.Owner == l.owner && h.Token == l.token {
			return h.TTL, nil
		}
	}
	err = fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	l.lose(err)
	return 0, err
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
	if remaining <= 0 && !(brokenBuild && broken.keepAliveNeverLoses) {
		l.lose(errDeadlinePassed)
	}
}

// lose ends the lease as lost with cause, once, and returns an error that
// matches ErrLost and cause (whether or not this call ended the lease).
func (l *Lease) lose(cause error) error {
	err := fmt.Errorf("%w: %q: %w", ErrLost, l.name, cause)
	l.end(err, Event{kind: eventLost, Name: l.name, Token: l.token, Err: err})
	return err
}

// end ends the lease with cause, once, and reports whether this call was the
// one that ended it. The observer hears of it before Done closes (unless an
// observer callback of this lease is running, see Observer), so that
// whoever wakes on Done finds the event already delivered. An Observer that
// panics does not keep Done open: the panic goes on to end's caller (the
// goroutine of Release, Extend, Err or the deadline timer) after Done closed.
func (l *Lease) end(cause error, ev Event) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended, l.cause = true, cause
	l.timer.Stop()
	l.enqueue(ev)
	l.mu.Unlock()
	defer l.cancel(cause)
	l.deliver()
	return true
}
