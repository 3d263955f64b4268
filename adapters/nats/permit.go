package nats

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitRead is a permit key's last message as a call read it (or as this
// Backend last wrote it: permitCache).
type permitRead struct {
	seq uint64      // the key's last revision, 0 when it has none: what a write expects
	st  permitState // resolved: every permit has its token
	at  int64       // the server's time when it stored the message (Unix ns); 0 when not read
}

// readPermits reads key's last message on the stream's leader. A key with
// no message, or whose last message removed it (an operator's KV delete or
// purge), holds an idle name with no last writer.
func (b *Backend) readPermits(ctx context.Context, key string) (permitRead, error) {
	cur, err := b.b.last(ctx, key)
	if err != nil || cur == nil {
		return permitRead{}, err
	}
	rd := permitRead{seq: cur.seq, at: cur.time.UnixNano()}
	if cur.removed() {
		return rd, nil
	}
	st, err := decodePermits(cur.data)
	if err == nil {
		st, err = st.resolve(cur.seq)
	}
	if err != nil {
		return permitRead{}, fmt.Errorf("revision %d of %s: %w", cur.seq, key, err)
	}
	rd.st = st
	return rd, nil
}

// readPermitsAt reads key and bounds the server's clock (permitNow), for
// a call that may set an expiry. When the Backend's clock sample is stale,
// the new sample is requested together with the read, so that both take
// one round trip.
func (b *Backend) readPermitsAt(ctx context.Context, key string) (permitRead, serverTime, error) {
	var sampled chan error
	if _, ok := b.clock.fresh(time.Now()); !ok {
		sampled = make(chan error, 1)
		go func() {
			_, err := b.sampleClock(ctx)
			sampled <- err
		}()
	}
	rd, err := b.readPermits(ctx, key)
	if sampled != nil {
		if serr := <-sampled; err == nil {
			err = serr
		}
	}
	if err != nil {
		return permitRead{}, serverTime{}, err
	}
	now, err := b.permitNow(ctx, rd.at)
	return rd, now, err
}

// writePermits publishes st as key's new state, expecting the key's last
// revision to be after (0: no message), and returns the new revision. The
// message has no TTL: the name's last writer outlives its permits. A write
// refused because the key moved on matches isConflict.
func (b *Backend) writePermits(ctx context.Context, key string, after uint64, st permitState) (uint64, error) {
	if st.idle() {
		st.shape, st.limit = 0, 0
	}
	seq, err := b.b.write(ctx, key, after, nil, st.encode(), 0)
	if err != nil {
		b.permitCache.drop(key)
		return 0, err
	}
	if written, err := st.resolve(seq); err == nil {
		b.permitCache.put(key, permitRead{seq: seq, st: written})
	} else {
		b.permitCache.drop(key)
	}
	return seq, nil
}

// lookupPermits returns key's state as this Backend last wrote or read it
// when cacheOK and it has one (no round trip; cached reports it), and
// otherwise reads it. A decision on a remembered state is acted on only
// by a write that expects its revision, which the leader refuses if the
// key moved on: the caller then reads. A call that would answer without
// writing (ErrNotHeld) reads first.
func (b *Backend) lookupPermits(ctx context.Context, key string, cacheOK bool) (rd permitRead, cached bool, err error) {
	if cacheOK {
		if rd, ok := b.permitCache.get(key); ok {
			return rd, true, nil
		}
	}
	rd, err = b.readPermits(ctx, key)
	if err != nil {
		b.permitCache.drop(key)
		return permitRead{}, false, err
	}
	b.permitCache.put(key, rd)
	return rd, false, nil
}

// permitOutcome is what acquirePermit decided.
type permitOutcome int

const (
	permitGranted permitOutcome = iota + 1 // a new permit: write it
	permitRenewed                          // owner's live permit extended: write it
	permitQueued                           // refused, owner's place kept: write it
	permitRefused                          // refused without a place: nothing to write
)

// decidePermit applies the driver contract's rules to st, the name's
// state as read, for the request req (whose Owner and Name are the
// caller's), at now: it drops the permits and places whose expiry has
// certainly passed (at or below now.lo), and returns the state to write,
// the grant (its Token 0 for a new permit: the revision of the write) and
// the outcome. A refusal's error is a *driver.HeldError with the time until
// the earliest permit certainly expires (and a full semaphore's number of
// permits); a shape that does not fit is an error matching
// driver.ErrShapeMismatch, and nothing is to be written.
func decidePermit(st permitState, now serverTime, req driver.Request) (permitState, driver.Grant, permitOutcome, error) {
	name, owner := req.Name, req.Owner
	st = st.live(now.lo)
	if !st.idle() && !driver.SameShape(st.shape, st.limit, req) {
		return permitState{}, driver.Grant{}, 0, driver.ShapeMismatch(name, st.shape, st.limit, req)
	}
	if i := st.holder(owner); i >= 0 {
		h := st.holders[i]
		if h.kind != req.Kind {
			return permitState{}, driver.Grant{}, 0, fmt.Errorf("%w: owner holds a %v permit on %q, asked for %v", driver.ErrShapeMismatch, h.kind, name, req.Kind)
		}
		st.holders = slices.Clone(st.holders)
		st.holders[i].expires = now.hi + int64(req.TTL)
		return st.withoutPlace(owner), driver.Grant{Token: h.token, PriorWriter: h.prior}, permitRenewed, nil
	}
	if st.idle() {
		st.setShape(req)
	}
	if st.admits(req.Kind, st.ahead(owner)) {
		h := permitHolder{owner: owner, kind: req.Kind, prior: st.lastWriter, expires: now.hi + int64(req.TTL)}
		st = st.withoutPlace(owner)
		st.holders = append(slices.Clone(st.holders), h)
		return st, driver.Grant{PriorWriter: h.prior}, permitGranted, nil
	}
	held := &driver.HeldError{Name: name, TTL: time.Duration(st.soonest(now.lo)), Kind: req.Kind}
	if st.shape == driver.Semaphore {
		held.Permits = st.limit
	}
	if req.Place == 0 {
		return permitState{}, driver.Grant{}, permitRefused, held
	}
	st.line = slices.Clone(st.line)
	expires := now.hi + int64(req.Place)
	if i := st.place(owner); i >= 0 {
		st.line[i].expires = expires
	} else {
		st.line = append(st.line, permitPlace{owner: owner, kind: req.Kind, expires: expires})
	}
	return st, driver.Grant{}, permitQueued, held
}

// acquirePermit takes a permit on req.Name for req.Owner, or keeps the
// owner's place in the name's line when req.Place > 0, by the rules of the
// driver contract.
//
// NATS KV has no transaction over keys, so a permit name's whole state is
// one key (PermitKey): its shape, its permits and its line, each with an
// expiry on the leader's clock (see clockSample), and its last writer.
// acquirePermit reads that key on the stream's leader, decides, and
// publishes the new state expecting the revision it read: the leader
// refuses the write if anything changed the key since, and the call reads
// again. A new permit's token is the revision of the message that grants
// it, which the leader issues from the bucket's stream sequence: above
// every token issued in the bucket before, a permit's or a lock's, and
// never lowered, even when the key is deleted or purged. A grant, a
// renewal and a kept place are two round trips (the read, the write); a
// refusal without a place is the read alone. Every fifth second or so a
// call also samples the leader's clock, in a request sent with the read.
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	name, owner := req.Name, req.Owner
	if req.Place > 0 {
		// Registered before the read: a change published from now on
		// reaches owner's mailbox (see awaitPermit).
		b.permitWaits.open(name, owner, req.Kind, req.Limit)
	}
	key := b.PermitKey(name)
	for {
		rd, now, err := b.readPermitsAt(ctx, key)
		if err != nil {
			return driver.Grant{}, opError(ctx, "acquire permit", name, err)
		}
		next, p, out, err := decidePermit(rd.st, now, req)
		if out == permitRefused || (err != nil && out == 0) {
			return driver.Grant{}, err
		}
		seq, werr := b.writePermits(ctx, key, rd.seq, next)
		if werr != nil {
			if isConflict(werr) && ctx.Err() == nil {
				continue // the key changed since the read: decide again
			}
			return driver.Grant{}, opError(ctx, "acquire permit", name, werr)
		}
		switch out {
		case permitQueued:
			b.permitWaits.queued(name, owner, seq, placeDue(next, owner, now))
			return driver.Grant{}, err
		case permitGranted:
			p.Token = fence.Token(seq)
			if !p.Token.Valid() {
				return driver.Grant{}, fmt.Errorf("fencekit/nats: acquire permit %q: revision %d exceeds the largest token", name, seq)
			}
		}
		b.permitWaits.close(name, owner)
		return p, nil
	}
}

// placeDue is when, by this machine's clock, the earliest place ahead of
// owner's in st has certainly expired on the leader's clock, which now
// bounded when st was read (the zero time when no place is ahead). A place
// whose waiter died expires without a message (the state's key has no TTL:
// it is dropped by the next call that reads it), so nothing would wake
// owner then: awaitPermit ends its wait at this time instead. A live
// waiter's place is renewed every third of its place TTL, long before it
// could expire, so with equal place TTLs this time comes after owner's own
// renewal and changes nothing.
func placeDue(st permitState, owner string, now serverTime) time.Time {
	e := st.aheadExpires(owner)
	if e == 0 {
		return time.Time{}
	}
	// The leader's clock certainly reads e once now.lo has advanced by
	// e - now.lo on this machine's, widened by the drift the sample allows.
	d := time.Duration(e - now.lo)
	return time.Now().Add(d + time.Duration(float64(d)*clockDrift) + time.Millisecond)
}

// extendPermit renews owner's live permit on name to ttl from now: a write
// of the name's state expecting the revision read, so a permit that was
// released, or dropped when its expiry had passed, is never re-created. It
// is one round trip when this Backend wrote or read the name's key last
// and nothing changed it since (it remembers the last state of up to 4096
// names and publishes at once, expecting its revision), and otherwise two
// (the leader refuses, or there is nothing remembered: a read, then the
// write).
func (b *Backend) extendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	key := b.PermitKey(name)
	for attempt := 0; ; attempt++ {
		rd, cached, err := b.lookupPermits(ctx, key, attempt == 0)
		if err != nil {
			return opError(ctx, "extend permit", name, err)
		}
		now, err := b.permitNow(ctx, rd.at)
		if err != nil {
			return opError(ctx, "extend permit", name, err)
		}
		st := rd.st.live(now.lo)
		i := st.holder(owner)
		if i < 0 {
			if cached {
				continue // what this Backend remembers may be behind: read
			}
			return driver.NotHeld(name)
		}
		st.holders = slices.Clone(st.holders)
		st.holders[i].expires = now.hi + int64(ttl)
		_, err = b.writePermits(ctx, key, rd.seq, st)
		if err == nil {
			return nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			return opError(ctx, "extend permit", name, err)
		}
	}
}

// releasePermit removes owner's permit from name's state, expecting the
// revision read (one round trip when remembered, as extendPermit). The
// published state is what wakes the waiters it lets in (awaitPermit). It
// never lowers a token: tokens are revisions, and the last writer stays in
// the state.
func (b *Backend) releasePermit(ctx context.Context, name, owner string) error {
	key := b.PermitKey(name)
	for attempt := 0; ; attempt++ {
		rd, cached, err := b.lookupPermits(ctx, key, attempt == 0)
		if err != nil {
			return opError(ctx, "release permit", name, err)
		}
		st := rd.st.live(max(b.clock.lower(time.Now()), rd.at))
		i := st.holder(owner)
		if i < 0 {
			if cached {
				continue
			}
			return driver.NotHeld(name)
		}
		st.holders = slices.Delete(slices.Clone(st.holders), i, i+1)
		_, err = b.writePermits(ctx, key, rd.seq, st)
		if err == nil {
			return nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			return opError(ctx, "release permit", name, err)
		}
	}
}

// leavePermitLine removes owner's place from name's line (one round trip
// when remembered, as extendPermit); nil when owner has none.
func (b *Backend) leavePermitLine(ctx context.Context, name, owner string) error {
	b.permitWaits.close(name, owner)
	key := b.PermitKey(name)
	for attempt := 0; ; attempt++ {
		rd, cached, err := b.lookupPermits(ctx, key, attempt == 0)
		if err != nil {
			return opError(ctx, "leave permit line", name, err)
		}
		st := rd.st.live(max(b.clock.lower(time.Now()), rd.at))
		if st.place(owner) < 0 {
			if cached {
				continue
			}
			return nil
		}
		_, err = b.writePermits(ctx, key, rd.seq, st.withoutPlace(owner))
		if err == nil {
			return nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			return opError(ctx, "leave permit line", name, err)
		}
	}
}

// inspectPermits reports name's shape, live permits, live places and last
// writer: a read on the stream's leader, and the leader's clock (sampled
// with the read when the Backend's sample is stale). A permit's remaining
// TTL is its expiry less the upper bound of the leader's clock, at least a
// millisecond: never more than it has left.
func (b *Backend) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	rd, now, err := b.readPermitsAt(ctx, b.PermitKey(name))
	if err != nil {
		return driver.Info{}, opError(ctx, "inspect permits", name, err)
	}
	st := rd.st.live(now.lo)
	ps := driver.Info{Name: name, Kind: st.shape, Limit: st.limit, Waiting: len(st.line), LastWriter: st.lastWriter}
	for _, h := range st.holders {
		ps.Holders = append(ps.Holders, driver.Holder{
			Owner: h.owner, Kind: h.kind, Token: h.token,
			TTL: max(time.Duration(h.expires-now.hi), time.Millisecond),
		})
	}
	return ps, nil
}

// maxCachedPermits bounds a Backend's memory of permit states; past it the
// memory starts over (a miss costs one read).
const maxCachedPermits = 4096

// permitCache remembers, per permit key, the last state this Backend wrote
// or read, so that extendPermit, releasePermit and leavePermitLine can
// write at once, expecting its revision (see lookupPermits).
type permitCache struct {
	mu sync.Mutex
	m  map[string]permitRead
}

func (c *permitCache) get(key string) (permitRead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rd, ok := c.m[key]
	return rd, ok
}

func (c *permitCache) put(key string, rd permitRead) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedPermits {
		c.m = make(map[string]permitRead)
	}
	c.m[key] = rd
}

func (c *permitCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
