package fenceotel

import (
	"context"

	"github.com/fencekit/fencekit/lock"
)

// Observer returns a lock Observer (for lock.Options.Observer) that records
// the event metrics: acquire duration, leases held, leases lost by cause,
// renewal failures and stale refusals. It then passes each event to next,
// when next is not nil (lock.SlogObserver, say), so that one Client can
// feed both.
//
// fencekit.lock.held goes up on every acquired event and down on every
// released or lost one, so it counts the leases of the Clients that use
// this Observer.
func (t *Telemetry) Observer(next func(lock.Event)) func(lock.Event) {
	return func(e lock.Event) {
		ctx := context.Background()
		switch e.Kind {
		case lock.EventAcquired:
			t.held.Add(ctx, 1, t.lockAttrs(e.Name))
			t.acquireDuration.Record(ctx, e.Elapsed.Seconds(), t.lockAttrs(e.Name))
		case lock.EventReleased:
			t.held.Add(ctx, -1, t.lockAttrs(e.Name))
		case lock.EventLost:
			t.held.Add(ctx, -1, t.lockAttrs(e.Name))
			t.lost.Add(ctx, 1, t.lockAttrs(e.Name, attrCause.String(e.Cause())))
		case lock.EventRenewalFailed:
			t.renewalFailures.Add(ctx, 1, t.lockAttrs(e.Name, attrCause.String(e.Cause())))
		case lock.EventStale:
			t.stale.Add(ctx, 1, t.lockAttrs(e.Name))
		}
		if next != nil {
			next(e)
		}
	}
}
