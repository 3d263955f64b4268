package fenceotel

import (
	"context"

	"github.com/fencekit/fencekit/lock"
)

// Observer returns a lock Observer (for lock.Options.Observer) that records
// the event metrics: acquire duration, leases held, leases lost by cause,
// renewal failures and stale refusals. It then calls next's field for the
// same event, when next and that field are not nil (lock.SlogObserver,
// say), so that one Client can feed both. The fields it records nothing
// for (Extended, Retrying) are next's own.
//
// fencekit.lock.held goes up on every acquired event and down on every
// released or lost one, so it counts the leases of the Clients that use
// this Observer.
func (t *Telemetry) Observer(next *lock.Observer) *lock.Observer {
	if next == nil {
		next = &lock.Observer{}
	}
	ctx := context.Background()
	then := func(f func(lock.Event), e lock.Event) {
		if f != nil {
			f(e)
		}
	}
	return &lock.Observer{
		Acquired: func(e lock.Event) {
			t.held.Add(ctx, 1, t.lockAttrs(e.Name))
			t.acquireDuration.Record(ctx, e.Elapsed.Seconds(), t.lockAttrs(e.Name))
			then(next.Acquired, e)
		},
		Released: func(e lock.Event) {
			t.held.Add(ctx, -1, t.lockAttrs(e.Name))
			then(next.Released, e)
		},
		Lost: func(e lock.Event) {
			t.held.Add(ctx, -1, t.lockAttrs(e.Name))
			t.lost.Add(ctx, 1, t.lockAttrs(e.Name, attrCause.String(e.Cause())))
			then(next.Lost, e)
		},
		RenewalFailed: func(e lock.Event) {
			t.renewalFailures.Add(ctx, 1, t.lockAttrs(e.Name, attrCause.String(e.Cause())))
			then(next.RenewalFailed, e)
		},
		Stale: func(e lock.Event) {
			t.stale.Add(ctx, 1, t.lockAttrs(e.Name))
			then(next.Stale, e)
		},
		Extended: next.Extended,
		Retrying: next.Retrying,
	}
}
