package nats

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// placeHeader carries a place's arrival, the sequence of the message that
// made it, on the messages that renew it; the message that makes a place
// carries none, its own sequence being its arrival.
const placeHeader = "Fencekit-Place"

// expectedSeqHeader is the revision a conditional publish expects its key
// to be at: on a delete marker, the revision it removes.
const expectedSeqHeader = "Nats-Expected-Last-Subject-Sequence"

// recheckFree bounds awaitTurn when the waiter's last read saw the lock
// free with one place ahead of its own: the waiter there is about to take
// it, or died (its place expires on the server without a message anyone
// can subscribe to), or the read came from a replica that had not yet
// applied its removal.
const recheckFree = 50 * time.Millisecond

// expiryPoll is the HeldError.TTL of the first in line when the holder's
// lease is past its TTL but the server has not removed it yet (it sweeps
// expired messages about once a second).
const expiryPoll = 100 * time.Millisecond

// placePoll is the shortest wait for a place ahead to expire (placeHint):
// the server removes an expired place on its sweep, about once a second,
// so asking sooner finds it still there.
const placePoll = time.Second

// QueueKey is the prefix of the keys of name's queue: a waiter's place is
// the KV key QueueKey(name) + "." + base64url(owner) (PlaceKey), written
// with a per-key TTL of the place TTL (rounded up to whole seconds, as
// every TTL here), so the server removes a place its waiter stopped
// renewing. Places are served in the order of their arrival: the revision
// of the message that made each one.
func (b *Backend) QueueKey(name string) string { return b.b.key("queue", name) }

// PlaceKey is owner's place in name's queue.
func (b *Backend) PlaceKey(name, owner string) string {
	return b.QueueKey(name) + "." + encodeName(owner)
}

// place is a live place in a queue.
type place struct {
	subject string
	seq     uint64 // its last message's revision
	arrival uint64 // the revision of the message that made it
	owner   string
	// written and ttl are its last message's time (the server's clock)
	// and TTL (0 when it has none): when the server will remove it unless
	// its waiter renews it.
	written time.Time
	ttl     time.Duration
}

// line is what one read of a lock and its queue shows.
type line struct {
	lock    *record // the lock key's last message; nil when it has none
	holder  *lease  // nil when the lock is free
	places  []place // live places, by arrival
	removed map[string]uint64
}

// mine returns the index of owner's place, or -1.
func (l line) mine(owner string) int {
	return slices.IndexFunc(l.places, func(p place) bool { return p.owner == owner })
}

// ahead returns the places ahead of owner's (all of them when owner has
// none), leaving out the holder's: a waiter that took the lock removes its
// place right after, and a leftover (its process died in between) holds up
// nobody while its owner holds the lock.
func (l line) ahead(owner string) []place {
	end := l.mine(owner)
	if end < 0 {
		end = len(l.places)
	}
	var out []place
	for _, p := range l.places[:end] {
		if l.holder == nil || p.owner != l.holder.owner {
			out = append(out, p)
		}
	}
	return out
}

// readLine reads name's lock key and every place of its queue in one
// request (lastMany). A replica may answer it from a state that lags: a
// place or a lease that a removal this Backend saw published was meant to
// remove (waker.gone) is taken as removed. With leader set, the lock key
// and owner's place are read again from the stream's leader (last), for a
// call whose write expected a revision that a replica's answer had shown
// and the leader refused.
func (b *Backend) readLine(ctx context.Context, name, owner string, leader bool) (line, error) {
	lk, qk := b.Key(name), b.QueueKey(name)
	rs, fresh, err := b.b.lastMany(ctx, []string{b.b.subject + lk, b.b.subject + qk + ".>"})
	if err != nil {
		return line{}, err
	}
	// A replica that kept lagging this Backend's own writes: the lock key
	// and owner's place from the leader.
	leader = leader || !fresh
	gone := b.waker.gone(name)
	stale := func(r subjectRecord) bool { return r.rec.seq <= gone[r.subject] }
	pk := b.b.subject + b.PlaceKey(name, owner)
	if leader {
		cur, err := b.b.last(ctx, b.PlaceKey(name, owner))
		if err != nil {
			return line{}, err
		}
		rs = slices.DeleteFunc(rs, func(r subjectRecord) bool { return r.subject == pk })
		if cur != nil {
			rs = append(rs, subjectRecord{subject: pk, rec: cur})
		}
	}
	ln := line{removed: map[string]uint64{}}
	for _, r := range rs {
		key := strings.TrimPrefix(r.subject, b.b.subject)
		if key == lk {
			ln.lock = r.rec
			continue
		}
		if stale(r) && !(leader && r.subject == pk) {
			continue // removed, as far as a removal this Backend saw shows
		}
		if r.rec.removed() {
			ln.removed[r.subject] = r.rec.seq
			continue
		}
		p := place{subject: r.subject, seq: r.rec.seq, arrival: r.rec.seq, owner: string(r.rec.data), written: r.rec.time}
		if ttl, err := parseMsgTTL(r.rec.header.Get(ttlHeader)); err == nil && ttl > 0 {
			p.ttl = ttl
		}
		if v := r.rec.header.Get(placeHeader); v != "" {
			n, ok := parseToken(v)
			if !ok {
				return line{}, fmt.Errorf("%w: place %q has arrival %q", ErrMalformedRecord, key, v)
			}
			p.arrival = uint64(n)
		}
		ln.places = append(ln.places, p)
	}
	slices.SortFunc(ln.places, func(a, b place) int {
		switch {
		case a.arrival < b.arrival:
			return -1
		case a.arrival > b.arrival:
			return 1
		}
		return 0
	})
	if leader {
		if ln.lock, err = b.b.last(ctx, lk); err != nil {
			return line{}, err
		}
	}
	if ln.holder, err = parseLease(ln.lock); err != nil {
		return line{}, err
	}
	if !leader && ln.lock != nil && stale(subjectRecord{subject: b.b.subject + lk, rec: ln.lock}) {
		// Released, by a delete marker this Backend saw: a take expecting
		// this revision is refused, and the next attempt reads the leader.
		ln.holder = nil
	}
	return ln, nil
}

// acquireInLine takes name for owner when the lock is free and no live
// place is ahead of owner's, minting the token exactly as acquireLock does
// (the revision of the message that takes the lock key); renews owner's
// lease when owner holds it (the same token); and otherwise keeps owner's
// place in name's queue for placeTTL (rounded up to whole seconds) and
// returns a *driver.HeldError. Its TTL, when owner is first in line, is when the
// holder's lease ends by its message's time and TTL (the server's) read
// against this machine's clock: a hint of when to ask again, never a
// decision (the server decides expiry; a place that asks early is told to
// wait again, and the hint is never beyond the lease's TTL from now).
//
// NATS KV has no transaction over two keys, so this is a read and then one
// conditional write, not one atomic step: one request reads the lock key
// and the whole queue (a direct get of the last message of each of their
// subjects, which a replica may answer), then either the lock key is
// written expecting the revision read (the leader refuses the write if the
// lock changed since, and the call reads again, the lock key from the
// leader), or owner's place is written expecting its own revision. A lock
// is never taken on a stale read. What a stale read can do is put owner
// behind a place that is already gone, or ahead of one that a replica had
// not applied yet: fairness, bounded by recheckFree and the renewals. A
// waiter that took the lock removes its place in a second write; until it
// does, and for ever if its process dies in between (until the place
// expires), its place is not counted ahead of anyone while it holds the
// lock.
//
// Two short ways skip the read of the whole queue: renewOnly (a waiter
// behind another that nothing woke) and takeWoken (the first in line,
// woken by the lock key's removal). When nobody waits it costs what
// acquireLock costs on a lease the Backend has not seen: two round trips,
// the read and the write.
func (b *Backend) acquireInLine(ctx context.Context, name, owner, md string, ttl, placeTTL time.Duration) (fence.Token, error) {
	if tok, ok, err := b.takeWoken(ctx, name, owner, md, ttl); ok || err != nil {
		return tok, err
	}
	if ok, err := b.renewOnly(ctx, name, owner, placeTTL); ok || err != nil {
		if err != nil {
			return 0, err
		}
		return 0, &driver.HeldError{Name: name}
	}
	// Registered before the read: a removal from now on wakes owner.
	b.waker.open(name, owner)
	tok, err := b.acquireOrEnqueue(ctx, name, owner, md, ttl, placeTTL)
	if err == nil {
		b.waker.close(name, owner)
	}
	return tok, err
}

func (b *Backend) acquireOrEnqueue(ctx context.Context, name, owner, md string, ttl, placeTTL time.Duration) (fence.Token, error) {
	lk, pk := b.Key(name), b.PlaceKey(name, owner)
	for attempt := 0; ; attempt++ {
		ln, err := b.readLine(ctx, name, owner, attempt > 0)
		if err == nil {
			err = b.dropGhosts(ctx, name, owner, &ln)
		}
		if err != nil {
			return 0, opError(ctx, "acquire", name, err)
		}
		mine := ln.mine(owner)
		ahead := ln.ahead(owner)
		switch {
		case ln.holder != nil && ln.holder.owner == owner:
			l := ln.holder
			seq, err := b.b.write(ctx, lk, l.seq, renewal(l.token), leaseData(owner, md), keyTTL(ttl))
			if err == nil {
				b.cache.put(lk, lease{seq: seq, owner: owner, metadata: md, token: l.token})
				if mine >= 0 {
					b.removePlace(ctx, pk, ln.places[mine].seq)
				}
				return l.token, nil
			}
			if !isConflict(err) || ctx.Err() != nil {
				b.cache.drop(lk)
				return 0, opError(ctx, "acquire", name, err)
			}
		case ln.holder == nil && len(ahead) == 0:
			var after uint64
			if ln.lock != nil {
				after = ln.lock.seq
			}
			seq, err := b.b.write(ctx, lk, after, nil, leaseData(owner, md), keyTTL(ttl))
			if err == nil {
				tok := fence.Token(seq)
				if !tok.Valid() {
					return 0, fmt.Errorf("fencekit/nats: acquire %q: revision %d exceeds the largest token", name, seq)
				}
				b.cache.put(lk, lease{seq: seq, owner: owner, metadata: md, token: tok})
				if mine >= 0 {
					b.removePlace(ctx, pk, ln.places[mine].seq)
				}
				return tok, nil
			}
			if !isConflict(err) || ctx.Err() != nil {
				return 0, opError(ctx, "acquire", name, err)
			}
		default:
			own, err := b.keepPlace(ctx, name, owner, placeTTL, ln, mine)
			if err == nil {
				return 0, b.held(name, owner, ln, ahead, own)
			}
			if !isConflict(err) || ctx.Err() != nil {
				return 0, opError(ctx, "enqueue", name, err)
			}
		}
		// A key changed between the read and the write (nothing was
		// written): decide again on what is there now.
	}
}

// ghostAfter is how long past its TTL a place read from a replica must be
// before acquireOrEnqueue asks the stream's leader whether it is still
// there: the server's expiry sweep (about a second) and some clock skew.
const ghostAfter = 2 * time.Second

// dropGhosts asks the stream's leader about each place ahead of owner's in
// ln (read from a replica, see readLine) that is ghostAfter past its TTL by
// its message's time (the server's clock) against this machine's, and
// drops from ln those the leader no longer has at that revision; the
// waker then drops them from later reads too. A replica that was killed
// (-9) and restarted can keep messages whose TTL ran out for good (seen
// with nats-server 2.15.2: the two restarted replicas of a soak still
// served places written 45 s before with a TTL of 1 s, which the third had
// expired), so its answers show waiters ahead that are long gone, and the
// line behind them would wait for ever: a place that no one renews is
// removed by its TTL, and nothing ever removes a ghost. The leader decides,
// as for every write: a place it still has (its sweep is late, or this
// machine's clock runs ahead) stays ahead. One leader read per such place
// and read of the line, only while a replica shows one.
func (b *Backend) dropGhosts(ctx context.Context, name, owner string, ln *line) error {
	now := time.Now()
	var ghosts map[string]bool
	for _, p := range ln.ahead(owner) {
		if p.ttl <= 0 || now.Before(p.written.Add(p.ttl+ghostAfter)) {
			continue
		}
		cur, err := b.b.last(ctx, strings.TrimPrefix(p.subject, b.b.subject))
		if err != nil {
			return err
		}
		if cur != nil && cur.seq == p.seq {
			continue // still there
		}
		if ghosts == nil {
			ghosts = map[string]bool{}
		}
		ghosts[p.subject] = true
		b.waker.forget(name, p.subject, p.seq)
	}
	if ghosts != nil {
		ln.places = slices.DeleteFunc(ln.places, func(p place) bool { return ghosts[p.subject] })
	}
	return nil
}

// keepPlace renews owner's place (mine, in ln) for placeTTL, or makes it at
// the tail when owner has none.
func (b *Backend) keepPlace(ctx context.Context, name, owner string, placeTTL time.Duration, ln line, mine int) (ownPlace, error) {
	pk := b.PlaceKey(name, owner)
	if mine >= 0 {
		p := ln.places[mine]
		seq, err := b.renewPlace(ctx, pk, owner, p.seq, p.arrival, placeTTL)
		return ownPlace{seq: seq, arrival: p.arrival}, err
	}
	// Over the marker a removed place left, if the read showed one.
	seq, err := b.b.write(ctx, pk, ln.removed[b.b.subject+pk], nil, []byte(owner), keyTTL(placeTTL))
	return ownPlace{seq: seq, arrival: seq}, err
}

// renewPlace writes owner's place at pk again for placeTTL, expecting its
// revision seq and keeping its arrival.
func (b *Backend) renewPlace(ctx context.Context, pk, owner string, seq, arrival uint64, placeTTL time.Duration) (uint64, error) {
	h := natsgo.Header{placeHeader: []string{strconv.FormatUint(arrival, 10)}}
	return b.b.write(ctx, pk, seq, h, []byte(owner), keyTTL(placeTTL))
}

// takeWoken is acquireInLine's short way for a waiter that was first in
// line at its last read and has been woken by a removal of the lock key
// since: places are only ever added behind it, so if the lock is free (one
// read of the lock key on the stream's leader) it takes it, as the full way
// would, without reading the whole queue, and removes its place. It reports
// false when the short way does not apply, the lock is held, or the take
// was refused (the caller reads the line).
func (b *Backend) takeWoken(ctx context.Context, name, owner, md string, ttl time.Duration) (fence.Token, bool, error) {
	lk := b.Key(name)
	w, ok := b.waker.get(name, owner)
	if !ok || !w.woken || w.target != b.b.subject+lk || w.own.seq == 0 {
		return 0, false, nil
	}
	cur, err := b.b.last(ctx, lk)
	if err != nil {
		return 0, false, opError(ctx, "acquire", name, err)
	}
	if l, err := parseLease(cur); err != nil || l != nil {
		return 0, false, nil
	}
	var after uint64
	if cur != nil {
		after = cur.seq
	}
	seq, err := b.b.write(ctx, lk, after, nil, leaseData(owner, md), keyTTL(ttl))
	if err != nil {
		if isConflict(err) && ctx.Err() == nil {
			return 0, false, nil
		}
		return 0, false, opError(ctx, "acquire", name, err)
	}
	tok := fence.Token(seq)
	if !tok.Valid() {
		return 0, false, fmt.Errorf("fencekit/nats: acquire %q: revision %d exceeds the largest token", name, seq)
	}
	b.cache.put(lk, lease{seq: seq, owner: owner, metadata: md, token: tok})
	b.removePlace(ctx, b.PlaceKey(name, owner), w.own.seq)
	b.waker.close(name, owner)
	return tok, true, nil
}

// ownPlace is a waiter's place as its last write left it.
type ownPlace struct {
	seq, arrival uint64
}

// renewOnly is acquireInLine's short way for a waiter that is not first
// in line, was not woken since its last call, and read the line less than
// half a place TTL ago: nothing it waits for was removed (a removal would
// have woken it), so it renews its place alone, one write expecting the
// revision its last write got, and stays behind the same place. It reports
// false when the short way does not apply or the write was refused (the
// place changed: the caller reads the line).
func (b *Backend) renewOnly(ctx context.Context, name, owner string, placeTTL time.Duration) (bool, error) {
	w, ok := b.waker.get(name, owner)
	if !ok || !w.covered || w.free || w.target == "" || w.target == b.b.subject+b.Key(name) ||
		w.own.seq == 0 || w.woken || time.Since(w.readAt) >= placeTTL/2 {
		return false, nil
	}
	seq, err := b.renewPlace(ctx, b.PlaceKey(name, owner), owner, w.own.seq, w.own.arrival, placeTTL)
	if err != nil {
		if isConflict(err) && ctx.Err() == nil {
			return false, nil
		}
		return false, opError(ctx, "enqueue", name, err)
	}
	b.waker.renewed(name, owner, seq)
	return true, nil
}

// held records what owner now waits for and returns its HeldError: with a
// hint of the holder's remaining TTL when owner is first in line.
func (b *Backend) held(name, owner string, ln line, ahead []place, own ownPlace) error {
	if len(ahead) > 0 {
		// Owner would be first but for one place, with the lock free: that
		// waiter is about to take the lock (and its removal of its place
		// wakes owner), unless it died or the read was stale: check again
		// soon. Further back, the renewals are soon enough.
		recheck := ln.holder == nil && len(ahead) == 1
		pred := ahead[len(ahead)-1]
		b.waker.set(name, owner, pred.subject, pred.seq, recheck, own, placeHint(pred))
		return &driver.HeldError{Name: name}
	}
	b.waker.set(name, owner, b.b.subject+b.Key(name), ln.lock.seq, false, own, time.Time{})
	return &driver.HeldError{Name: name, TTL: remainingHint(ln.lock)}
}

// placeHint is when the place p, just ahead of a waiter's, expires unless
// its waiter renews it: its message's time and TTL (the server's) against
// this machine's clock, at least placePoll from now and at most its TTL;
// the zero time when it has no TTL. A dead waiter's place expires on the
// server with a marker that no subscription sees (see waker), so the
// waiter behind it asks again then (awaitTurn) rather than at its own
// renewal. A hint, as remainingHint's: a clock that runs ahead makes the
// waiter ask sooner (every placePoll at worst), one that runs behind
// leaves it to its renewal, and what it sees is decided by the server.
// A live waiter renews its place every third of its place TTL, so with
// equal place TTLs this comes after the renewal of the waiter behind it
// and changes nothing.
func placeHint(p place) time.Time {
	if p.ttl <= 0 {
		return time.Time{}
	}
	return time.Now().Add(min(max(time.Until(p.written.Add(p.ttl)), placePoll), p.ttl))
}

// remainingHint is when the lease in cur ends, by its message's time and
// TTL against this machine's clock, within [expiryPoll, its TTL].
func remainingHint(cur *record) time.Duration {
	ttl, err := parseMsgTTL(cur.header.Get(ttlHeader))
	if err != nil || ttl <= 0 {
		return expiryPoll
	}
	return min(max(time.Until(cur.time.Add(ttl)), expiryPoll), ttl)
}

// removePlace removes the place at pk that a waiter left when it took the
// lock, expecting its revision seq: a delete marker with a TTL of its own,
// which wakes the waiter behind it. Best effort: the lock is taken, and a
// place left behind is counted ahead of nobody while its owner holds the
// lock, and expires with its TTL.
func (b *Backend) removePlace(ctx context.Context, pk string, seq uint64) {
	_, _ = b.b.write(ctx, pk, seq, natsgo.Header{kvOpHeader: []string{"DEL"}}, nil, releaseMarkerTTL)
}

// awaitTurn blocks until a removal that may be owner's turn (the lock key
// deleted by its holder's release when owner is first in line; otherwise
// the place ahead of owner's removed, as its waiter took the lock or left),
// max has passed, or ctx ends. It listens with core NATS subscriptions on
// the lock key's and the queue's KV subjects, one pair per lock and
// Backend, kept while the Backend has a waiter there (and for 10 s after):
// the first wait on a lock subscribes, waits for the server to confirm, and
// reads the key it waits on from the stream's leader: when that moved on
// since the line was read, it returns at once, so that the caller reads
// again and misses no removal that came before. After a read that saw the
// lock free with one place ahead of owner's, it waits at most 50 ms
// (recheckFree); behind a place, no longer than until that place expires
// unless renewed (placeHint), after which the caller reads the whole line.
// When the Backend keeps no wait for owner (it is not in line here, or past
// 65536 waiters), nothing can wake it and it waits max.
func (b *Backend) awaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	w, ok := b.waker.get(name, owner)
	if !ok {
		// Not in line through this Backend, or past maxWaits: nothing
		// will wake owner, so it waits for max (its renewal), not less.
		return wake.Wait(ctx, nil, max)
	}
	if !w.covered {
		subjects := []string{b.b.subject + b.Key(name), b.b.subject + b.QueueKey(name) + ".>"}
		if _, err := b.waker.subscribe(ctx, b.b.js.Conn(), name, subjects); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return opError(ctx, "await turn", name, err)
		}
		// Every removal from now on is seen. One that came between the
		// line's read and now shows as a new revision of the key waited
		// for (read on the leader): then ask again at once.
		if w.target == "" {
			return nil
		}
		cur, err := b.b.last(ctx, strings.TrimPrefix(w.target, b.b.subject))
		if err != nil || cur == nil || cur.seq != w.targetSeq {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		}
	}
	if w.free {
		max = min(max, recheckFree)
	}
	expiring := false
	if !w.due.IsZero() {
		if d := time.Until(w.due); d < max {
			max, expiring = d, true
		}
	}
	if err := wake.Wait(ctx, w.box, max); err != nil {
		return err
	}
	if expiring && !time.Now().Before(w.due) {
		// The place ahead may have expired, which no message says: the
		// next call reads the line (not renewOnly's short way).
		b.waker.expired(name, owner)
	}
	return nil
}

// leaveQueue removes owner's place in name's queue (a read on the stream's
// leader, then a delete marker that expects the read revision), which
// wakes the waiter behind it. It returns nil when owner has no place.
func (b *Backend) leaveQueue(ctx context.Context, name, owner string) error {
	b.waker.close(name, owner)
	pk := b.PlaceKey(name, owner)
	for {
		cur, err := b.b.last(ctx, pk)
		if err != nil {
			return opError(ctx, "leave queue", name, err)
		}
		if cur == nil || cur.removed() {
			return nil
		}
		_, err = b.b.write(ctx, pk, cur.seq, natsgo.Header{kvOpHeader: []string{"DEL"}}, nil, releaseMarkerTTL)
		if err == nil {
			return nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			return opError(ctx, "leave queue", name, err)
		}
	}
}
