package lock

import (
	"fmt"

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
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one thing that happened to a lease. Observers get it by value.
type Event struct {
	Kind  EventKind
	Name  string      // the lock name
	Token fence.Token // the lease's token
	Key   string      // for EventStale, the key whose write was refused
	Err   error       // for EventLost and EventStale, the cause
}
