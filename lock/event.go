package lock

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Observer holds the functions a Client calls as its leases change, one
// per kind of event (modelled on net/http/httptrace.ClientTrace): set the
// ones you need; a nil field is skipped. Options.Observer takes it.
//
// A lease's events reach the Observer one at a time, in the order they
// happened, on the goroutine that caused them (the caller's, the
// keep-alive's, or the deadline timer's). A function may call the lease's
// methods, Release and Extend included: an event that such a call causes
// is delivered right after the current function returns, instead of from
// inside it. Otherwise the terminal event (Released or Lost) is delivered
// before Done closes.
//
// The functions must not block: the keep-alive and the deadline timer wait
// for them.
type Observer struct {
	// Acquired: a lease was acquired.
	Acquired func(Event)
	// Extended: a lease was renewed, by Extend or the keep-alive.
	Extended func(Event)
	// Released: a lease was released by its holder.
	Released func(Event)
	// Lost: a lease was lost; Event.Err says why.
	Lost func(Event)
	// Stale: a fenced write through Lease.Fenced (or one reported with
	// ReportStale) was refused as stale.
	Stale func(Event)
	// RenewalFailed: a renewal (Extend, or the keep-alive's) failed in a
	// way that did not end the lease; Event.Err says why. The keep-alive
	// tries again sooner; the lease is lost if no renewal succeeds before
	// its local deadline. A run of these is the warning that a loss is
	// coming.
	RenewalFailed func(Event)
	// Retrying: an acquire attempt failed and Acquire (or Do) will try
	// again; Event.Err is the attempt's error (ErrHeld or a transient
	// failure) and Event.Attempt its number. There is no lease yet, so
	// Token is 0. The last attempt, after which Acquire gives up, is not
	// reported.
	Retrying func(Event)
}

// eventKind names what happened to a lease: which Observer field hears of
// it.
type eventKind int

const (
	eventAcquired eventKind = iota + 1
	eventExtended
	eventReleased
	eventLost
	eventStale
	eventRenewalFailed
	eventRetrying
)

// String returns the event's name, as SlogObserver's messages use it.
func (k eventKind) String() string {
	switch k {
	case eventAcquired:
		return "acquired"
	case eventExtended:
		return "extended"
	case eventReleased:
		return "released"
	case eventLost:
		return "lost"
	case eventStale:
		return "stale"
	case eventRenewalFailed:
		return "renewal-failed"
	case eventRetrying:
		return "retrying"
	}
	return fmt.Sprintf("eventKind(%d)", int(k))
}

// hook returns o's function for events of kind k, or nil: o is nil, or the
// field is.
func (o *Observer) hook(k eventKind) func(Event) {
	if o == nil {
		return nil
	}
	switch k {
	case eventAcquired:
		return o.Acquired
	case eventExtended:
		return o.Extended
	case eventReleased:
		return o.Released
	case eventLost:
		return o.Lost
	case eventStale:
		return o.Stale
	case eventRenewalFailed:
		return o.RenewalFailed
	case eventRetrying:
		return o.Retrying
	}
	return nil
}

// Event is one thing that happened to a lease; the Observer field that gets
// it says what. Observers get it by value.
type Event struct {
	kind  eventKind   // which Observer field the event is for
	Name  string      // the lock name
	Token fence.Token // the lease's token
	Key   string      // for Stale, the key whose write was refused
	// Err is the cause, for Lost, Stale, RenewalFailed and Retrying.
	Err error
	// Attempt is, for Retrying, the number of the attempt that failed (1
	// for the first); for Acquired, the number of the attempt that
	// succeeded.
	Attempt int
	// Elapsed is, for Acquired, the time from the start of the acquiring
	// call (Acquire, TryAcquire, Do, Campaign) to the lease, backoff
	// included.
	Elapsed time.Duration
	// Metadata is the holder metadata the lease was acquired with
	// (Options.Metadata, or ContextWithMetadata's); for Retrying,
	// Options.Metadata.
	Metadata string
}
