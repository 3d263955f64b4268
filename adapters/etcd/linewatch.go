package etcd

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lineLinger is how long a Backend keeps watching a name's line after its
// last waiter on it stopped waiting: a worker that queues again right after
// its release finds the watch still open instead of creating it again.
const lineLinger = time.Second

// lineWatch mirrors one name's line (its lock key and its queue's places,
// with their create revisions) from two watches that the Backend keeps
// open while its waiters wait on the name, and wakes each waiter in
// awaitTurn when the key it waits for is deleted. One lineWatch serves
// every waiter of the Backend on the name, over any number of awaitTurn
// calls: a waiter's wake-up, and its renewal of its place, cost no watch
// create, cancel or read of their own.
//
// When the place a waiter waits behind is deleted because that waiter took
// the lock (or left), the lineWatch finds the waiter's new place in line
// from its mirror: behind another place, or first behind the holder, whose
// lock key it then waits for. Only the deletion of the lock key (a release,
// or the holder's lease expiring) while it is first, or the loss of its own
// place, ends its awaitTurn. When a waiter becomes first, awaitTurn grants
// the lease of its coming acquisition ahead (see Backend.pregrant).
type lineWatch struct {
	b      *Backend
	name   string
	lk, qk string
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch has ended

	mu sync.Mutex
	// ready is set once the line has been read at the revision where both
	// watches began; lockKnown and queueKnown are the revisions up to which
	// the mirror holds every change of the lock key and of the queue.
	ready                 bool
	lockKnown, queueKnown int64
	holder                int64            // create revision of the lock key, 0 when absent
	places                map[string]int64 // place key → create revision
	turns                 map[*turn]struct{}
	active                int // awaitTurn calls using the watch
	idle                  *time.Timer
	ended                 bool
}

// turn is one awaitTurn call's wait: for key to be deleted (created at
// rev), as owner's place (pk, created at place) stands in line.
type turn struct {
	owner, pk string
	key       string
	rev       int64
	place     int64
	woken     chan struct{} // closed when owner's wait is over
	first     chan struct{} // owner became first in line behind a holder
	isWoken   bool
	// pendingAt, when rev is -1, is the queue revision at which owner
	// became first: whether the lock was free then is known once the
	// lock key's watch has reached it (its events come on a watch of
	// their own). pending wakes owner if it has not by pendingWait.
	pendingAt int64
	pending   *time.Timer
}

// pendingWait bounds how long a waiter that became first in line waits for
// the lock key's watch to say whether the lock was free then, before it is
// woken to ask (when the place ahead of it was deleted without the lock
// key changing in the same step: a waiter left or its place expired).
const pendingWait = 30 * time.Millisecond

// lines holds the Backend's lineWatches by name.
type lines struct {
	mu sync.Mutex
	m  map[string]*lineWatch
}

// lineFor returns the lineWatch of name, starting one when there is none,
// for one awaitTurn call, which must call done on it when it returns.
func (b *Backend) lineFor(name string, w clientv3.Watcher) *lineWatch {
	b.lines.mu.Lock()
	defer b.lines.mu.Unlock()
	lw := b.lines.m[name]
	if lw == nil {
		ctx, cancel := context.WithCancel(context.Background())
		lw = &lineWatch{
			b: b, name: name, lk: b.LockKey(name), qk: b.QueueKey(name),
			cancel: cancel, done: make(chan struct{}),
			places: map[string]int64{}, turns: map[*turn]struct{}{},
		}
		if b.lines.m == nil {
			b.lines.m = map[string]*lineWatch{}
		}
		b.lines.m[name] = lw
		go lw.run(ctx, w)
	}
	lw.mu.Lock()
	lw.active++
	if lw.idle != nil {
		lw.idle.Stop()
		lw.idle = nil
	}
	lw.mu.Unlock()
	return lw
}

// doneWith ends one awaitTurn call's use of lw: the watch closes after
// lineLinger without another.
func (lw *lineWatch) doneWith(t *turn) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if t.pending != nil {
		t.pending.Stop()
	}
	delete(lw.turns, t)
	lw.active--
	if lw.active == 0 && !lw.ended {
		lw.idle = time.AfterFunc(lineLinger, lw.closeIfIdle)
	}
}

func (lw *lineWatch) closeIfIdle() {
	lw.b.lines.mu.Lock()
	defer lw.b.lines.mu.Unlock()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.active == 0 {
		lw.endLocked()
	}
}

// end marks the watch ended (it broke, or its context ended), wakes every
// waiter on it so that they ask again, and forgets it, so that the next
// awaitTurn starts another.
func (lw *lineWatch) end() {
	lw.b.lines.mu.Lock()
	defer lw.b.lines.mu.Unlock()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.endLocked()
}

func (lw *lineWatch) endLocked() {
	if lw.ended {
		return
	}
	lw.ended = true
	if lw.b.lines.m[lw.name] == lw {
		delete(lw.b.lines.m, lw.name)
	}
	lw.cancel()
	close(lw.done)
	for t := range lw.turns {
		lw.wake(t)
	}
}

// add registers t, and wakes it at once when the mirror already shows its
// key deleted.
func (lw *lineWatch) add(t *turn) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.ended {
		lw.wake(t)
		return
	}
	lw.turns[t] = struct{}{}
	lw.check(t)
	if !t.isWoken && t.key == lw.lk && t.rev >= 0 {
		t.signalFirst()
	}
}

func (lw *lineWatch) wake(t *turn) {
	if t.pending != nil {
		t.pending.Stop()
	}
	if !t.isWoken {
		t.isWoken = true
		close(t.woken)
	}
	delete(lw.turns, t)
}

func (t *turn) signalFirst() {
	select {
	case t.first <- struct{}{}:
	default:
	}
}

// check decides t against the mirror: wait on, follow the line to the
// place now ahead of t's owner (or to the lock key when it is first), or
// wake. It waits on while the mirror has not yet seen the revision it
// needs.
func (lw *lineWatch) check(t *turn) {
	if !lw.ready || t.isWoken {
		return
	}
	if t.key == lw.lk {
		switch {
		case t.rev < 0: // became first: was the lock free then?
			if lw.lockKnown < t.pendingAt {
				return
			}
			t.pending.Stop()
			if lw.holder == 0 {
				lw.wake(t)
				return
			}
			t.rev = lw.holder
			t.signalFirst()
			lw.b.waits.follow(lw.name, t.owner, t.place, t.key, t.rev)
		case t.rev == 0: // the lock was free when read
			lw.wake(t)
		case t.rev > lw.lockKnown:
		case lw.holder != t.rev: // released, expired, or taken again since
			lw.wake(t)
		}
		return
	}
	if t.rev > lw.queueKnown || t.place > lw.queueKnown || lw.places[t.key] == t.rev {
		return
	}
	if lw.places[t.pk] != t.place {
		lw.wake(t) // owner's own place is gone: let it queue again
		return
	}
	var ahead string
	var aheadRev int64
	for k, r := range lw.places {
		if r < t.place && r > aheadRev {
			ahead, aheadRev = k, r
		}
	}
	switch {
	case ahead != "":
		t.key, t.rev = ahead, aheadRev
	case lw.lockKnown < lw.queueKnown:
		// The lock key's watch has not yet delivered the revision at
		// which owner became first (the one ahead most often took the
		// lock in that same step): wait for it, briefly.
		t.key, t.rev, t.pendingAt = lw.lk, -1, lw.queueKnown
		t.pending = time.AfterFunc(pendingWait, func() {
			lw.mu.Lock()
			defer lw.mu.Unlock()
			if t.rev < 0 {
				lw.wake(t)
			}
		})
		return
	case lw.holder == 0:
		lw.wake(t) // first in line, and the lock is free
		return
	default:
		t.key, t.rev = lw.lk, lw.holder
		t.signalFirst()
	}
	lw.b.waits.follow(lw.name, t.owner, t.place, t.key, t.rev)
}

// quiet reports whether t still waits, on the mirror as it stands, for a
// place ahead of it that is there: what the Backend may answer a renewal
// with without reading the line (see acquireInLine).
func (lw *lineWatch) quiet(t *turn) bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.ready && !lw.ended && !t.isWoken && t.key != lw.lk &&
		lw.places[t.key] == t.rev && lw.places[t.pk] == t.place
}

// run watches the lock key and the queue from the current revision, reads
// both at the revision where the watches began, then applies each event.
// As in the Backend's other reads, a watch from a past revision would be
// served by etcd's catch-up loop (every 100 ms); reading at the watches'
// start revision instead misses nothing.
func (lw *lineWatch) run(ctx context.Context, w clientv3.Watcher) {
	defer lw.end()
	ctx = clientv3.WithRequireLeader(ctx)
	lc := w.Watch(ctx, lw.lk, clientv3.WithCreatedNotify())
	qc := w.Watch(ctx, lw.qk, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	var r0 int64
	for _, ch := range []clientv3.WatchChan{lc, qc} {
		wr, ok := <-ch
		if !ok || wr.Err() != nil || !wr.Created {
			return
		}
		r0 = max(r0, wr.Header.Revision)
	}
	resp, err := lw.b.client.Txn(ctx).Then(
		clientv3.OpGet(lw.lk, clientv3.WithRev(r0)),
		clientv3.OpGet(lw.qk, clientv3.WithPrefix(), clientv3.WithRev(r0)),
	).Commit()
	if err != nil {
		return
	}
	lw.mu.Lock()
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		lw.holder = kvs[0].CreateRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		lw.places[string(kv.Key)] = kv.CreateRevision
	}
	lw.lockKnown, lw.queueKnown, lw.ready = r0, r0, true
	lw.checkAll()
	lw.mu.Unlock()
	for {
		var wr clientv3.WatchResponse
		var ok, isLock bool
		select {
		case wr, ok = <-lc:
			isLock = true
		case wr, ok = <-qc:
		case <-ctx.Done():
			return
		}
		if !ok || wr.Err() != nil || wr.Canceled {
			return
		}
		lw.apply(wr.Events, isLock, r0)
	}
}

// apply applies the events after r0 to the mirror and checks every waiter.
func (lw *lineWatch) apply(evs []*clientv3.Event, isLock bool, r0 int64) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for _, ev := range evs {
		rev := ev.Kv.ModRevision
		if rev <= r0 {
			continue
		}
		put := ev.Type == mvccpb.PUT
		if isLock {
			lw.holder = 0
			if put {
				lw.holder = ev.Kv.CreateRevision
			}
			lw.lockKnown = max(lw.lockKnown, rev)
			continue
		}
		if put {
			lw.places[string(ev.Kv.Key)] = ev.Kv.CreateRevision
		} else {
			delete(lw.places, string(ev.Kv.Key))
		}
		lw.queueKnown = max(lw.queueKnown, rev)
	}
	lw.checkAll()
}

func (lw *lineWatch) checkAll() {
	for t := range lw.turns {
		lw.check(t)
	}
}
