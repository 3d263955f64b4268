package lock

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/fence"
)

// Events of a lease are queued under the lease's lock in the order they
// happen, and handed to the Observer by one goroutine at a time, outside the
// lock. So the Observer may call back into the lease (Release from a Lost
// event raised by the keep-alive, say) without deadlocking: the event
// that call raises is queued, and delivered by the goroutine already
// delivering, once the current callback returns.

// emit queues ev and delivers it, unless a delivery is already under way.
func (l *Lease) emit(ev Event) {
	l.mu.Lock()
	l.enqueue(ev)
	l.mu.Unlock()
	l.deliver()
}

// enqueue queues ev for the Observer. The caller holds l.mu.
func (l *Lease) enqueue(ev Event) {
	if l.client.opts.Observer != nil {
		ev.Metadata = l.metadata
		l.events = append(l.events, ev)
	}
}

// deliver hands queued events to the Observer, unless another call is
// already doing so (that call delivers them instead).
func (l *Lease) deliver() {
	l.mu.Lock()
	if l.delivering {
		l.mu.Unlock()
		return
	}
	l.delivering = true
	for len(l.events) > 0 {
		ev := l.events[0]
		l.events = l.events[1:]
		l.mu.Unlock()
		l.observeOne(ev)
		l.mu.Lock()
	}
	l.delivering = false
	l.mu.Unlock()
}

// observeOne calls the Observer; if it panics, the lease can still deliver
// later events.
func (l *Lease) observeOne(ev Event) {
	ok := false
	defer func() {
		if !ok {
			l.mu.Lock()
			l.delivering = false
			l.mu.Unlock()
		}
	}()
	l.client.observe(ev)
	ok = true
}

// The causes of a lease lost on this side; Event.Cause tells them apart.
var (
	errDeadlinePassed = errors.New("local deadline passed without a successful renewal")
	errLateReply      = errors.New("the renewal's reply arrived after the local deadline")
)

// Cause returns a short label, from a fixed set, for why the event
// happened, for logs and metric attributes. It tells by the Observer field
// the Client delivered the event to, so an Event made outside this package
// gets "":
//
//   - Lost: "not-held" (the backend no longer held the lease: expired
//     there, or released by someone else), "deadline" (the local deadline
//     passed without a successful renewal), "late-reply" (a renewal's
//     reply came after the local deadline) or "renewal-error" (a renewal
//     failed with an error that will not heal).
//   - RenewalFailed and Retrying: "held" (another owner holds the lock),
//     "timeout" (a context ended), or "transient".
//   - Stale: "stale".
//   - Otherwise "".
func (e Event) Cause() string {
	switch e.kind {
	case eventLost:
		switch {
		case errors.Is(e.Err, ErrNotHeld):
			return "not-held"
		case errors.Is(e.Err, errDeadlinePassed):
			return "deadline"
		case errors.Is(e.Err, errLateReply):
			return "late-reply"
		}
		return "renewal-error"
	case eventRenewalFailed, eventRetrying:
		switch {
		case errors.Is(e.Err, ErrHeld):
			return "held"
		case errors.Is(e.Err, context.DeadlineExceeded), errors.Is(e.Err, context.Canceled):
			return "timeout"
		}
		return "transient"
	case eventStale:
		return "stale"
	}
	return ""
}

// leaseKey is the context key of the lease that ContextWithLease attaches.
type leaseKey struct{}

// ContextWithLease returns a copy of ctx that carries lease, so that fenced
// writes made outside Lease.Fenced with that context report a stale
// refusal to the lease's Observer.Stale: Guard.Check and
// UpdateFenced of adapters/postgres and adapters/sqldb do, through
// ReportStale. The contexts that Do,
// TryDo, Lead and WithLease give out carry their lease already.
func ContextWithLease(ctx context.Context, lease *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, lease)
}

// LeaseFromContext returns the lease ctx carries, or nil.
func LeaseFromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// ReportStale reports err to the Observer of the lease that ctx carries
// (ContextWithLease), as a Stale event for key, when err matches
// fence.ErrStale; the event's Token is the refused token when err carries a
// *fence.StaleError, else the lease's. It returns err unchanged. A fenced
// resource that is not a fence.Store (a transaction guard, an update of
// the caller's own rows) calls it with its result, so that its refusals
// reach the same Observer as those of Lease.Fenced. Without a lease in ctx,
// or with no Observer, it does nothing.
func ReportStale(ctx context.Context, key string, err error) error {
	if !errors.Is(err, fence.ErrStale) || ctx == nil {
		return err
	}
	l := LeaseFromContext(ctx)
	if l == nil {
		return err
	}
	token := l.token
	var stale *fence.StaleError
	if errors.As(err, &stale) && stale.Token.Valid() {
		token = stale.Token
	}
	l.emit(Event{kind: eventStale, Name: l.name, Token: token, Key: key, Err: err})
	return err
}
