package lock

import (
	"fmt"
	"testing"
)

// everyEvent returns an Observer whose every field calls f, for the tests
// inside the package, which tell the events apart by their kind. Each field
// checks that it got an event of its own kind.
func everyEvent(f func(Event)) *Observer {
	field := func(k eventKind) func(Event) {
		return func(e Event) {
			if e.kind != k {
				panic(fmt.Sprintf("a %v event reached the %v field", e.kind, k))
			}
			f(e)
		}
	}
	return &Observer{
		Acquired:      field(eventAcquired),
		Extended:      field(eventExtended),
		Released:      field(eventReleased),
		Lost:          field(eventLost),
		Stale:         field(eventStale),
		RenewalFailed: field(eventRenewalFailed),
		Retrying:      field(eventRetrying),
	}
}

// Every kind has a field, a name, and only its own field; a nil Observer
// or an unknown kind has none.
func TestObserverHookPerKind(t *testing.T) {
	var got eventKind
	obs := everyEvent(func(e Event) { got = e.kind })
	names := map[string]bool{}
	for k := eventAcquired; k <= eventRetrying; k++ {
		got = 0
		f := obs.hook(k)
		if f == nil {
			t.Fatalf("no field for %v", k)
		}
		f(Event{kind: k})
		if got != k {
			t.Errorf("hook(%v) called the field for %v", k, got)
		}
		names[k.String()] = true
	}
	if len(names) != int(eventRetrying) {
		t.Errorf("kind names %v; want %d distinct", names, eventRetrying)
	}
	if s := eventKind(99).String(); s != "eventKind(99)" {
		t.Errorf("eventKind(99).String() = %q", s)
	}
	if obs.hook(0) != nil || obs.hook(99) != nil {
		t.Error("hook of an unknown kind is not nil")
	}
	if (*Observer)(nil).hook(eventAcquired) != nil {
		t.Error("hook of a nil Observer is not nil")
	}
	if (&Observer{}).hook(eventLost) != nil {
		t.Error("hook of an unset field is not nil")
	}
}
