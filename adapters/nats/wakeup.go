package nats

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/internal/wake"
)

// subLinger is how long a Backend keeps listening on a lock's subjects after
// its last waiter there took the lock or left: a worker that releases and
// queues again at once finds the subscription still up.
const subLinger = 10 * time.Second

// maxWaits bounds the waiters a Backend keeps state for; past it a new
// waiter gets no wake-ups (it renews its place every third of its place
// TTL, and asks again then).
const maxWaits = 1 << 16

// waiting is one waiter's state between acquireInLine and awaitTurn.
type waiting struct {
	box chan struct{}
	// target is the subject whose removal is this waiter's turn: the lock
	// key's when it is first in line, otherwise its predecessor's place.
	// Empty until acquireInLine has read the line: any removal wakes it.
	target string
	// targetSeq is target's revision when the line was read.
	targetSeq uint64
	// own is owner's place as its last write left it, readAt when the
	// line was last read (see Backend.renewOnly).
	own    ownPlace
	readAt time.Time
	// woken: a removal was posted to box since the line was last read.
	woken bool
	// free: the last read saw the lock free and one place ahead (a waiter
	// about to take it, or one that died): awaitTurn asks again soon.
	free bool
	// covered: the lock's subjects were subscribed before the last read,
	// so every removal since then reaches box.
	covered bool
	// due is when the place target expires unless renewed (placeHint),
	// zero when target is the lock key or has no TTL.
	due time.Time
}

// lockSubs are a Backend's subscriptions to one lock's subjects: the lock
// key's and its queue's.
type lockSubs struct {
	subs    []*natsgo.Subscription
	waiters map[string]*waiting // by owner
	linger  *time.Timer
	// gone maps a subject of the lock to the highest revision that a
	// removal published there expected to remove: a read that still shows
	// that revision (or an older one) there came from a replica that had
	// not applied the removal yet (see line.dropGone).
	gone map[string]uint64
}

// maxGone bounds a lock's gone map; past it the map starts over.
const maxGone = 4096

// waker dispatches the removals that a Backend's core NATS subscriptions
// see to the waiters they concern. A subscription on a KV subject sees
// every message published to it (a release's delete marker, a leaveQueue's,
// a place removed by the waiter that took the lock), whether or not the
// stream accepts it, but not what the server writes by itself (the marker
// of an expiry): a holder's expiry is waited for by its deadline
// (driver.HeldError.TTL), a dead waiter's by the renewals behind it.
type waker struct {
	mu    sync.Mutex
	locks map[string]*lockSubs // by lock name
	n     int                  // waiters kept
}

// open registers owner as waiting on name before acquireInLine reads the
// line, and reports the mailbox; a removal from now on posts to it.
func (w *waker) open(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.locks == nil {
		w.locks = map[string]*lockSubs{}
	}
	ls := w.locks[name]
	if ls == nil {
		ls = &lockSubs{waiters: map[string]*waiting{}}
		w.locks[name] = ls
	}
	if ls.linger != nil {
		ls.linger.Stop()
		ls.linger = nil
	}
	wt := ls.waiters[owner]
	if wt == nil {
		if w.n >= maxWaits {
			return
		}
		wt = &waiting{box: wake.NewBox()}
		ls.waiters[owner] = wt
		w.n++
	}
	wt.target, wt.targetSeq, wt.free, wt.woken, wt.due = "", 0, false, false, time.Time{}
	wt.covered = len(ls.subs) > 0
}

// set records what owner waits for after a read of the line.
func (w *waker) set(name, owner, target string, targetSeq uint64, free bool, own ownPlace, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ls := w.locks[name]; ls != nil {
		if wt := ls.waiters[owner]; wt != nil {
			wt.target, wt.targetSeq, wt.free, wt.due = target, targetSeq, free, due
			wt.own, wt.readAt = own, time.Now()
		}
	}
}

// expired notes that the place owner waits behind may have expired: like a
// removal, it makes the next call read the line.
func (w *waker) expired(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ls := w.locks[name]; ls != nil {
		if wt := ls.waiters[owner]; wt != nil {
			wt.woken = true
		}
	}
}

// renewed records the revision of owner's place after a renewal that did
// not read the line.
func (w *waker) renewed(name, owner string, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ls := w.locks[name]; ls != nil {
		if wt := ls.waiters[owner]; wt != nil {
			wt.own.seq = seq
		}
	}
}

// gone returns, for name's subjects, the highest revision a removal seen
// there expected to remove (see lockSubs.gone).
func (w *waker) gone(name string) map[string]uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ls := w.locks[name]; ls != nil && len(ls.gone) > 0 {
		return maps.Clone(ls.gone)
	}
	return nil
}

// forget records that the message seq of subject, one of name's, is gone
// (the stream's leader no longer has it): a read that still shows it came
// from a replica that kept it (see Backend.dropGhosts).
func (w *waker) forget(name, subject string, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ls := w.locks[name]
	if ls == nil {
		return
	}
	if ls.gone == nil || len(ls.gone) >= maxGone {
		ls.gone = map[string]uint64{}
	}
	ls.gone[subject] = max(ls.gone[subject], seq)
}

// get returns owner's state on name.
func (w *waker) get(name, owner string) (waiting, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ls := w.locks[name]; ls != nil {
		if wt := ls.waiters[owner]; wt != nil {
			return *wt, true
		}
	}
	return waiting{}, false
}

// close forgets owner's wait on name (it took the lock, or left), and
// unsubscribes from the lock's subjects subLinger after its last waiter.
func (w *waker) close(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ls := w.locks[name]
	if ls == nil {
		return
	}
	if _, ok := ls.waiters[owner]; ok {
		delete(ls.waiters, owner)
		w.n--
	}
	if len(ls.waiters) > 0 || ls.linger != nil {
		return
	}
	if len(ls.subs) == 0 {
		delete(w.locks, name)
		return
	}
	ls.linger = time.AfterFunc(subLinger, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.locks[name] != ls || len(ls.waiters) > 0 || ls.linger == nil {
			return
		}
		for _, s := range ls.subs {
			_ = s.Unsubscribe()
		}
		delete(w.locks, name)
	})
}

// subscribe makes sure name's subjects are subscribed, and reports whether
// they were before: when not, it subscribes and waits for the server to
// confirm (a flush, one round trip), and the caller must read the line
// again, as a removal between its last read and now was not seen.
func (w *waker) subscribe(ctx context.Context, nc *natsgo.Conn, name string, subjects []string) (bool, error) {
	w.mu.Lock()
	ls := w.locks[name]
	if ls == nil || len(ls.subs) > 0 {
		w.mu.Unlock()
		return ls != nil, nil
	}
	for _, subj := range subjects {
		s, err := nc.Subscribe(subj, func(m *natsgo.Msg) { w.dispatch(ls, m) })
		if err != nil {
			for _, s := range ls.subs {
				_ = s.Unsubscribe()
			}
			ls.subs = nil
			w.mu.Unlock()
			return false, err
		}
		ls.subs = append(ls.subs, s)
	}
	w.mu.Unlock()
	return false, nc.FlushWithContext(ctx)
}

// dispatch wakes the waiters of ls that m concerns: a removal (a KV delete
// or purge) of the subject they wait on, or of any of the lock's subjects
// for a waiter that has not read the line since it was registered.
func (w *waker) dispatch(ls *lockSubs, m *natsgo.Msg) {
	if m.Header.Get(kvOpHeader) == "" {
		return // a lease or a place written, not removed
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if seq, err := strconv.ParseUint(m.Header.Get(expectedSeqHeader), 10, 64); err == nil && seq > 0 {
		if ls.gone == nil || len(ls.gone) >= maxGone {
			ls.gone = map[string]uint64{}
		}
		ls.gone[m.Subject] = max(ls.gone[m.Subject], seq)
	}
	for _, wt := range ls.waiters {
		if wt.target == "" || wt.target == m.Subject {
			wt.woken = true
			wake.Post(wt.box)
		}
	}
}
