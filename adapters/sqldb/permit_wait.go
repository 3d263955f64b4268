package sqldb

import (
	"context"
	"sync"
	"time"

	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitWaiters are the owners in a permit name's line through one
// Backend, each with a mailbox, so that a releasePermit or leavePermitLine
// through the same Backend wakes them at once. A waiter is registered by
// an acquirePermit that asks for a place, before its transaction, so that
// a wake-up sent after it committed is kept for awaitPermit; it is
// forgotten when it is admitted or leaves the line, or when it has not
// renewed its place for longer than twice its place TTL (it gave up
// without a word).
type permitWaiters struct {
	mu    sync.Mutex
	names map[string]map[string]*permitWaiter // name → owner → waiter
}

type permitWaiter struct {
	box   chan struct{}
	until time.Time // forgotten after this, unless renewed
}

// register records owner's place in name's line, renewed for place.
func (w *permitWaiters) register(name, owner string, place time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	line := w.line(name)
	for o, x := range line {
		if now.After(x.until) {
			delete(line, o)
		}
	}
	x := line[owner]
	if x == nil {
		x = &permitWaiter{box: wake.NewBox()}
		line[owner] = x
	}
	x.until = now.Add(2 * place)
}

// line returns name's waiters, made on first use. w.mu is held.
func (w *permitWaiters) line(name string) map[string]*permitWaiter {
	if w.names == nil {
		w.names = map[string]map[string]*permitWaiter{}
	}
	line := w.names[name]
	if line == nil {
		line = map[string]*permitWaiter{}
		w.names[name] = line
	}
	return line
}

// box returns owner's mailbox, or nil when owner is not in name's line
// here (awaitPermit without a kept place: it re-checks only).
func (w *permitWaiters) box(name, owner string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.names[name][owner]; x != nil {
		return x.box
	}
	return nil
}

// forget takes owner out of name's line.
func (w *permitWaiters) forget(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := w.names[name]
	delete(line, owner)
	if len(line) == 0 {
		delete(w.names, name)
	}
}

// wake posts a wake-up to every waiter of name here: a permit or a place
// went, which may let any of them in (the contract allows waking them
// all; each re-checks, and those not let in wait again).
func (w *permitWaiters) wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.names[name] {
		wake.Post(x.box)
	}
}

// awaitPermit waits until owner may be let in on name, max has passed, or
// ctx ends: nil in the first two cases (the caller then asks acquirePermit
// again), an error matching ctx.Err() in the third.
//
// database/sql has no push, so a wait ends in one of two ways. A
// releasePermit or leavePermitLine through the same Backend wakes the
// waiters of the name at once (a wake-up sent after acquirePermit kept the
// place is kept until awaitPermit reads it). A release through another
// Backend, another process, or an expiry is seen by re-checking: one
// read-only statement that reads the name's rows and applies
// acquirePermit's rules, QueuePoll after the wait began, then a quarter
// later each time, up to MaxQueuePoll. So across processes the wake-up
// latency is at most MaxQueuePoll (20 ms) plus one statement, once a wait
// has lasted about 100 ms, and each waiter costs at most one statement per
// MaxQueuePoll. A failed re-check ends the wait early, so that the
// caller's next acquirePermit reports the failure.
func (b *Backend) awaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	box := b.pw.box(name, owner)
	select {
	case <-box: // nil: never ready
		return nil
	default:
	}
	deadline := time.Now().Add(max)
	every := QueuePoll
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		wait := min(every, left)
		t.Reset(wait)
		select {
		case <-box:
			return nil
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if wait == left {
			return nil
		}
		every = min(every+every/4, MaxQueuePoll)
		if in, err := b.permitTurn(ctx, name, owner); in || err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		}
	}
}

// permitTurn reports whether acquirePermit would now let owner in, by its
// own place's kind (or owner has no live place, and must renew it): one
// read-only statement.
func (b *Backend) permitTurn(ctx context.Context, name, owner string) (bool, error) {
	n, rows, err := b.readPermits(ctx, b.db, b.pm.read, name)
	if err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.owner == owner && r.live() && r.place() {
			req := driver.Request{Name: name, Owner: owner, Kind: r.kind, TTL: driver.MinTTL, Place: driver.MinPlaceTTL}
			if r.kind == driver.Semaphore {
				req.Limit = n.limit
			}
			return planPermit(name, owner, n, rows, req).admitted(), nil
		}
	}
	return true, nil
}
