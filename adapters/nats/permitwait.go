package nats

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitWaiter is one waiter's state between acquirePermit and awaitPermit.
type permitWaiter struct {
	box   chan struct{}
	kind  driver.Kind
	limit int
	// seq is the revision of the state in which owner's place was last
	// written, 0 before the first: a change decided on an older state
	// cannot land after it.
	seq uint64
	// covered: the name's key was subscribed before owner's last read, so
	// every change published since reaches box.
	covered bool
	// due is when the earliest place ahead of owner's at its last read has
	// certainly expired (placeDue), zero when none was ahead: an expiry
	// publishes nothing, so awaitPermit waits no longer than that.
	due time.Time
}

// permitSubs is a Backend's subscription to one permit name's key, and the
// waiters it serves.
type permitSubs struct {
	sub     *natsgo.Subscription
	waiters map[string]*permitWaiter // by owner
	linger  *time.Timer
}

func (ps *permitSubs) waiter(owner string) *permitWaiter {
	if ps == nil {
		return nil
	}
	return ps.waiters[owner]
}

// permitWaker dispatches the states published to the permit keys that a
// Backend's waiters wait on to the waiters they may let in. It subscribes
// with core NATS to each such key's subject (not a JetStream consumer: a
// subscription costs the server nothing per message and needs no request
// to create), which sees every message published there: every change of
// the name, since nothing else writes the key (it has no TTL, so the
// server writes no marker on it). It also sees a publish the stream
// refused; that can only wake a waiter for nothing, never keep one asleep.
type permitWaker struct {
	mu    sync.Mutex
	names map[string]*permitSubs
	n     int // waiters kept
}

// open registers owner as waiting on name for a permit of kind before
// acquirePermit reads the name's state.
func (w *permitWaker) open(name, owner string, kind driver.Kind, limit int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names == nil {
		w.names = map[string]*permitSubs{}
	}
	ps := w.names[name]
	wt := ps.waiter(owner)
	if wt == nil && w.n >= maxWaits {
		return // past the bound: owner renews its place, and asks then
	}
	if ps == nil {
		ps = &permitSubs{waiters: map[string]*permitWaiter{}}
		w.names[name] = ps
	}
	if ps.linger != nil {
		ps.linger.Stop()
		ps.linger = nil
	}
	if wt == nil {
		wt = &permitWaiter{box: wake.NewBox()}
		ps.waiters[owner] = wt
		w.n++
	}
	wt.kind, wt.limit, wt.due = kind, limit, time.Time{}
	wt.covered = ps.sub != nil
}

// queued records the revision of the state that holds owner's place, and
// when the earliest place ahead of it has certainly expired (placeDue).
func (w *permitWaker) queued(name, owner string, seq uint64, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps := w.names[name]; ps != nil {
		if wt := ps.waiters[owner]; wt != nil {
			wt.seq, wt.due = seq, due
		}
	}
}

func (w *permitWaker) get(name, owner string) (permitWaiter, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps := w.names[name]; ps != nil {
		if wt := ps.waiters[owner]; wt != nil {
			return *wt, true
		}
	}
	return permitWaiter{}, false
}

// cover notes that every change since owner's last read reaches it.
func (w *permitWaker) cover(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ps := w.names[name]; ps != nil && ps.sub != nil {
		if wt := ps.waiters[owner]; wt != nil {
			wt.covered = true
		}
	}
}

// close forgets owner's wait on name (it got a permit, or left), and
// unsubscribes from the name's key subLinger after its last waiter.
func (w *permitWaker) close(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ps := w.names[name]
	if ps == nil {
		return
	}
	if _, ok := ps.waiters[owner]; ok {
		delete(ps.waiters, owner)
		w.n--
	}
	if len(ps.waiters) > 0 || ps.linger != nil {
		return
	}
	if ps.sub == nil {
		delete(w.names, name)
		return
	}
	ps.linger = time.AfterFunc(subLinger, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.names[name] != ps || len(ps.waiters) > 0 || ps.linger == nil {
			return
		}
		_ = ps.sub.Unsubscribe()
		delete(w.names, name)
	})
}

// subscribe makes sure name's key is subscribed: when it was not, it
// subscribes and waits for the server to confirm (a flush, one round
// trip).
func (w *permitWaker) subscribe(ctx context.Context, nc *natsgo.Conn, name, subject string) error {
	w.mu.Lock()
	ps := w.names[name]
	if ps == nil || ps.sub != nil {
		w.mu.Unlock()
		return nil
	}
	sub, err := nc.Subscribe(subject, func(m *natsgo.Msg) { w.dispatch(ps, m) })
	if err != nil {
		w.mu.Unlock()
		return err
	}
	ps.sub = sub
	w.mu.Unlock()
	return nc.FlushWithContext(ctx)
}

// dispatch wakes the waiters of ps that the state published in m may let
// in (mayAdmit). A message that expected a revision older than the one
// that holds a waiter's place concerns it no more: the stream refused it,
// or the waiter's own read saw its effect. A removal of the key, or data
// that is not a state, wakes every waiter.
func (w *permitWaker) dispatch(ps *permitSubs, m *natsgo.Msg) {
	expected, expErr := strconv.ParseUint(m.Header.Get(expectedSeqHeader), 10, 64)
	st, err := decodePermits(m.Data)
	if m.Header.Get(kvOpHeader) != "" {
		err = errRemoved
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for owner, wt := range ps.waiters {
		if expErr == nil && wt.seq > 0 && expected < wt.seq {
			continue
		}
		if err != nil || mayAdmit(st, owner, wt.kind, wt.limit) {
			wake.Post(wt.box)
		}
	}
}

// errRemoved marks a message that removed a permit key.
var errRemoved = errors.New("the permit key was removed")

// mayAdmit reports whether a state published for name may let owner, who
// waits for a permit of kind, in, or needs owner to act: the admission rule
// with owner's place where it stands, every entry taken as live (a message
// carries no time; a permit or place that expired is left to the waiter's
// next renewal, as the driver contract allows). A state without owner's
// place (it expired, or was dropped) or of another shape wakes owner too,
// to queue again or learn of it. A state in which owner holds a permit
// does not: only owner's own call grants it.
func mayAdmit(st permitState, owner string, kind driver.Kind, limit int) bool {
	if st.holder(owner) >= 0 {
		return false
	}
	if st.place(owner) < 0 {
		return true
	}
	if !driver.SameShape(st.shape, st.limit, driver.Request{Kind: kind, Limit: limit}) {
		return true
	}
	return st.admits(kind, st.ahead(owner))
}

// awaitPermit blocks until a change of name's state that may let owner in
// (a permit released, a place ahead taken up or left, owner's place gone),
// max has passed, or ctx ends. It listens on a core NATS subscription to
// the name's key, one per name and Backend, kept while the Backend has a
// waiter on the name (and for 10 s after). The first wait on a name
// subscribes, waits for the server to confirm, and reads the name's state
// on the leader, returning at once when a change after owner's place was
// written may let owner in, so that no wake-up sent before the
// subscription is lost. An expiry publishes nothing: a permit's is waited
// for by its HeldError.TTL (acquirePermit's: the Client asks again when
// the earliest permit has certainly expired), and a place ahead of owner's
// that expires (its waiter died) ends the wait here when it certainly has
// (placeDue), so the waiter behind a dead one is let in then, not at its
// renewal. When the Backend keeps no wait for owner (it is not in line
// here, or past 65536 waiters), nothing can wake it and it waits max.
func (b *Backend) awaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	wt, ok := b.permitWaits.get(name, owner)
	if !ok {
		return wake.Wait(ctx, nil, max)
	}
	if !wt.covered {
		key := b.PermitKey(name)
		if err := b.permitWaits.subscribe(ctx, b.b.js.Conn(), name, b.b.subject+key); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return opError(ctx, "await permit", name, err)
		}
		rd, err := b.readPermits(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil // ask again rather than miss a turn
		}
		b.permitWaits.cover(name, owner)
		st := rd.st.live(max64(b.clock.lower(time.Now()), rd.at))
		if rd.seq != wt.seq && mayAdmit(st, owner, wt.kind, wt.limit) {
			return nil
		}
	}
	if !wt.due.IsZero() {
		if d := time.Until(wt.due); d < max {
			max = d // a place ahead expires first: ask again then
		}
	}
	return wake.Wait(ctx, wt.box, max)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
