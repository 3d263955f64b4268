package lock

import (
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// EventKind names what happened to a lease.
type EventKind int

// The events a Client reports to Options.Observer.
const (
	// EventAcquired: a lease was acquired.
	EventAcquired EventKind = iota + 1
	// EventExtended: a lease was renewed, by Extend or the keep-alive.
	EventExtended
	// EventReleased: a lease was released by its holder.
	EventReleased
	// EventLost: a lease was lost; Event.Err says why.
	EventLost
	// EventStale: a fenced write through Lease.Fenced was refused as stale.
	EventStale
	// EventRenewalFailed: a renewal (Extend, or the keep-alive's) failed
	// in a way that did not end the lease; Event.Err says why. The
	// keep-alive tries again sooner; the lease is lost if no renewal
	// succeeds before its local deadline. A run of these is the warning
	// that a loss is coming.
	EventRenewalFailed
	// EventRetrying: an acquire attempt failed and Acquire (or Do) will
	// try again; Event.Err is the attempt's error (ErrHeld or a transient
	// failure) and Event.Attempt its number. There is no lease yet, so
	// Token is 0. The last attempt, after which Acquire gives up, is not
	// reported.
	EventRetrying
)

// String returns the event's name.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventExtended:
		return "extended"
	case EventReleased:
		return "released"
	case EventLost:
		return "lost"
	case EventStale:
		return "stale"
	case EventRenewalFailed:
		return "renewal-failed"
	case EventRetrying:
		return "retrying"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one thing that happened to a lease. Observers get it by value.
type Event struct {
	Kind  EventKind
	Name  string      // the lock name
	Token fence.Token // the lease's token
	Key   string      // for EventStale, the key whose write was refused
	// Err is the cause, for EventLost, EventStale, EventRenewalFailed and
	// EventRetrying.
	Err error
	// Attempt is, for EventRetrying, the number of the attempt that failed
	// (1 for the first); for EventAcquired, the number of the attempt that
	// succeeded.
	Attempt int
	// Elapsed is, for EventAcquired, the time from the start of the
	// acquiring call (Acquire, TryAcquire, Do, Campaign) to the lease,
	// backoff included.
	Elapsed time.Duration
	// Metadata is the holder metadata the lease was acquired with
	// (Options.Metadata, or ContextWithMetadata's); for EventRetrying,
	// Options.Metadata.
	Metadata string
}
