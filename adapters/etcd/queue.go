package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// QueueKey is the prefix of name's queue: a waiter's place is the key
// QueueKey(name) + owner (with '%' and '/' escaped), holding the owner and
// attached to an etcd lease of the place TTL of its own, so the cluster
// deletes a place that its waiter stopped renewing. Places are served in
// the order of their keys' create revisions.
func (b *Backend) QueueKey(name string) string { return b.prefix + "queue/" + escapeKey(name) + "/" }

// PlaceKey is owner's place in name's queue.
func (b *Backend) PlaceKey(name, owner string) string { return b.QueueKey(name) + escapeKey(owner) }

// wait is what a waiter's last acquireInLine saw: the key whose deletion
// is its turn (its predecessor's place, or the lock key when it is first
// in line) and that key's create revision, by which awaitTurn tells that
// it was deleted between the two calls.
type wait struct {
	key    string
	keyRev int64 // the create revision of key when read; 0 if it was absent
	place  int64 // the create revision of owner's place
	// placeLease is the etcd lease of owner's place, which a renewal
	// keeps alive.
	placeLease clientv3.LeaseID
	// renewed is when placeLease was last renewed, or after.
	renewed time.Time
	// ttl is the lock TTL owner asked for, for the lease granted ahead.
	ttl time.Duration
	// quiet is set when owner's last awaitTurn ran out with the line
	// watch showing the place ahead of owner's still there: the next
	// acquireInLine renews owner's place without reading the line.
	quiet bool
}

// preLease is the lease granted ahead for a waiter first in line (see
// Backend.pregrant): granted at at for ttl; 0 while the grant is under way.
type preLease struct {
	id  clientv3.LeaseID
	at  time.Time
	ttl time.Duration
}

// waits holds the wait of each (name, owner) that is in line, for
// awaitTurn. Entries go when their owner takes the lock or leaves.
type waits struct {
	mu sync.Mutex
	m  map[[2]string]wait
	// pre holds the leases granted ahead, by (name, owner).
	pre map[[2]string]preLease
	// seen is when a call on each name was last refused: a hint that the
	// next call on it will be refused too.
	seen map[string]time.Time
}

func (w *waits) set(name, owner string, v wait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[[2]string]wait{}
	}
	w.m[[2]string{name, owner}] = v
}

func (w *waits) get(name, owner string) (wait, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.m[[2]string{name, owner}]
	return v, ok
}

// follow records that owner's place (made at place) now waits for key,
// made at keyRev: the line watch saw the place ahead of it go.
func (w *waits) follow(name, owner string, place int64, key string, keyRev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	if v, ok := w.m[k]; ok && v.place == place {
		v.key, v.keyRev, v.quiet = key, keyRev, false
		w.m[k] = v
	}
}

// markQuiet sets the wait's quiet flag, if owner still waits at place for
// key made at keyRev.
func (w *waits) markQuiet(name, owner string, place int64, key string, keyRev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	if v, ok := w.m[k]; ok && v.place == place && v.key == key && v.keyRev == keyRev {
		v.quiet = true
		w.m[k] = v
	}
}

// startPre reserves the lease granted ahead for (name, owner), which waits
// with lock TTL ttl; false when there is one already, or a grant under way,
// or owner no longer waits.
func (w *waits) startPre(name, owner string) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	v, ok := w.m[k]
	if _, busy := w.pre[k]; busy || !ok || v.ttl == 0 {
		return 0, false
	}
	if w.pre == nil {
		w.pre = map[[2]string]preLease{}
	}
	w.pre[k] = preLease{}
	return v.ttl, true
}

// endPre stores the lease granted ahead (id 0: the grant failed), and
// reports false when owner no longer waits for it (the caller revokes it).
func (w *waits) endPre(name, owner string, p preLease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	cur, ok := w.pre[k]
	if !ok || cur.id != 0 {
		return false
	}
	if _, waiting := w.m[k]; !waiting || p.id == 0 {
		delete(w.pre, k)
		return false
	}
	w.pre[k] = p
	return true
}

// endPreAgain puts back a lease granted ahead that a call took but did not
// use; false when owner no longer waits or has another (the caller revokes
// this one).
func (w *waits) endPreAgain(name, owner string, p preLease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	if _, busy := w.pre[k]; busy {
		return false
	}
	if _, waiting := w.m[k]; !waiting {
		return false
	}
	if w.pre == nil {
		w.pre = map[[2]string]preLease{}
	}
	w.pre[k] = p
	return true
}

// takePre removes and returns the lease granted ahead for (name, owner),
// if there is one.
func (w *waits) takePre(name, owner string) (preLease, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	p, ok := w.pre[k]
	if !ok || p.id == 0 {
		return preLease{}, false
	}
	delete(w.pre, k)
	return p, true
}

// maxContended bounds the names whose contention waits remembers.
const maxContended = 4096

// sawContended notes that a call on name was refused: the lock is contended.
func (w *waits) sawContended(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]time.Time{}
	}
	if len(w.seen) >= maxContended {
		clear(w.seen) // a hint only: forgetting costs a round trip
	}
	w.seen[name] = time.Now()
}

// contended reports whether a call on name was refused within the last
// place.
func (w *waits) contended(name string, place time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.seen[name]
	return ok && time.Since(at) < place
}

// drop forgets owner's wait, and returns the lease granted ahead for it,
// if any, which the caller revokes unless it used it.
func (w *waits) drop(name, owner string) clientv3.LeaseID {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{name, owner}
	delete(w.m, k)
	p := w.pre[k]
	if p.id != 0 {
		delete(w.pre, k)
	}
	return p.id
}

// dropWait forgets owner's wait, revoking in the background the lease
// granted ahead for it unless it is used (the lease of the lock owner took).
func (b *Backend) dropWait(ctx context.Context, name, owner string, used clientv3.LeaseID) {
	if id := b.waits.drop(name, owner); id != 0 && id != used {
		b.revoke(ctx, id)
	}
}

// takeAttempts bounds the Txns one acquireInLine spends trying to take a
// lock that its reads showed free for owner, against waiters racing for it;
// after them it keeps owner's place and lets the wake-up bring it back.
const takeAttempts = 3

// line is what one read of a lock and its queue shows.
type line struct {
	holder *mvccpb.KeyValue   // the lock key, nil when the lock is free
	places []*mvccpb.KeyValue // the queue, in order of create revision
}

// at returns the index of key in the queue, or -1.
func (l line) at(key string) int {
	return slices.IndexFunc(l.places, func(kv *mvccpb.KeyValue) bool { return string(kv.Key) == key })
}

// acquireInLine takes name for owner when the lock is free and no place
// is ahead of owner's (minting the lock key's create revision as the token,
// as acquireLock does), moves owner's own lease to a fresh etcd lease of ttl
// when owner holds the lock, or else keeps owner's place in name's queue
// for place (rounded up to whole seconds, as every etcd lease) and returns
// a *driver.HeldError. Its TTL, when owner is first in line behind a holder,
// is the holder's remaining TTL rounded up to whole seconds (etcd reports it
// rounded down); 0 otherwise. Places whose lease ran out are already gone:
// the cluster deleted them.
//
// When nobody waits it costs what acquireLock costs: a LeaseGrant and one
// Txn, which takes the lock if its key does not exist and the queue is empty,
// or, for a waiter, if its place (as its last call saw it) is first in
// line: a waiter woken by a release takes the lock in those two requests.
// Otherwise the Txn reads the lock key and the queue, and acquireInLine
// renews owner's place (a KeepAlive), or creates it (a LeaseGrant and a
// Txn), or takes the lock (a Txn); a waiter first in line behind a holder
// also asks for the holder's remaining TTL (a LeaseTimeToLive). The lock's
// unused lease is revoked in the background. A waiter that was behind
// another one, and an owner new to a lock on which this Backend saw a call
// refused within the place TTL, read the line first (a read-only Txn) and
// grant a lease only when it is their turn: a waiter woken because the one
// ahead took the lock renews its place in three requests (Txn, KeepAlive,
// LeaseTimeToLive); a worker queueing again right after its release makes
// its place in three (Txn, LeaseGrant, Txn), one Raft write fewer than
// through acquireLock's path, and when the lock turns out free it takes it in
// one request more than acquireLock.
//
// A waiter whose awaitTurn granted the lease of its acquisition ahead (it
// was first in line behind a holder, see awaitTurn) takes the lock after
// the release with that lease: one Txn and a KeepAlive sent alongside it
// (renewing the lease from this call on, without a Raft write), instead of
// a LeaseGrant and the Txn. A waiter behind another one whose awaitTurn ran
// out with the Backend's watch of the line showing the place ahead of it
// still there renews its place with one KeepAlive, without reading the
// line: if that place went in the instant before (an event not yet
// delivered), the call answers ErrHeld from that view, and the waiter's
// next awaitTurn returns at once.
func (b *Backend) acquireInLine(ctx context.Context, name, owner, md string, ttl, place time.Duration) (fence.Token, error) {
	lk, mk, qk, pk := b.LockKey(name), b.MetaKey(name), b.QueueKey(name), b.PlaceKey(name, owner)
	readLine := []clientv3.Op{
		clientv3.OpGet(lk),
		clientv3.OpGet(qk, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	}
	w, waiting := b.waits.get(name, owner)
	if waiting && w.quiet && w.key != lk && w.placeLease != clientv3.NoLease {
		// A renewal: owner's last awaitTurn ran out while the line watch
		// showed the place ahead of owner's still there. Keep owner's
		// place alive (one KeepAlive) without reading the line; a
		// deletion the watch had not yet delivered wakes owner's next
		// awaitTurn at once.
		_, err := b.client.KeepAliveOnce(ctx, w.placeLease)
		if err == nil {
			w.quiet = false
			w.ttl, w.renewed = ttl, time.Now()
			b.waits.set(name, owner, w)
			b.waits.sawContended(name)
			return 0, &driver.HeldError{Name: name}
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, opError(ctx, "enqueue", name, err)
		}
		// The place expired: read the line and queue again.
	}
	readFirst := b.waits.contended(name, place)
	if waiting {
		readFirst = w.key != lk
	}
	if readFirst {
		// Owner was behind another waiter, or is new to a lock this
		// Backend saw contended within a place TTL. Most such calls (a
		// renewal, the wake-up when the one ahead took the lock, a worker
		// queueing again after its release) leave owner in line: read the
		// line first (a read-only Txn, which etcd answers without a Raft
		// write), and grant a lease only when it is owner's turn.
		resp, err := b.client.Txn(ctx).Then(readLine...).Commit()
		if err != nil {
			return 0, opError(ctx, "enqueue", name, err)
		}
		ln := readOf(resp.Responses)
		mine := ln.at(pk)
		turn := ln.holder == nil && (len(ln.places) == 0 || mine == 0)
		if !turn && (ln.holder == nil || string(ln.holder.Value) != owner) {
			return 0, b.keepPlace(ctx, name, owner, ttl, place, ln, readLine)
		}
	}
	// The lease granted ahead while owner was first in line, when it is
	// still young: the acquisition then needs no LeaseGrant. It renews the
	// lease (a KeepAlive, no Raft write) alongside the Txn, sent after this
	// call began, so that the lock lasts ttl from now without a round trip
	// more in the handoff.
	lease, ahead := clientv3.NoLease, false
	pre, ok := b.waits.takePre(name, owner)
	if ok {
		if pre.ttl == ttl && time.Since(pre.at) < ttl/2 {
			lease, ahead = pre.id, true
		} else {
			b.revoke(ctx, pre.id)
		}
	}
	type renewal struct {
		sent time.Time
		err  error
	}
	renewed := make(chan renewal, 1)
	if ahead {
		go func() {
			sent := time.Now()
			_, err := b.client.KeepAliveOnce(ctx, lease)
			renewed <- renewal{sent, err}
		}()
	} else {
		var err error
		if lease, err = b.grant(ctx, ttl); err != nil {
			return 0, opError(ctx, "acquire", name, err)
		}
	}
	took := func(tok fence.Token) (fence.Token, error) {
		b.dropWait(ctx, name, owner, lease)
		if waiting {
			// The Txn deleted owner's place: its lease holds no key.
			b.putSpare(w.placeLease, place, w.renewed)
		}
		if ahead {
			if r := <-renewed; r.err != nil {
				return 0, opError(ctx, "acquire", name, r.err)
			}
		}
		return tok, nil
	}
	// keep puts the lease granted ahead back, renewed, for owner's next
	// call.
	keep := func() {
		if !ahead {
			return
		}
		r := <-renewed
		if r.err == nil {
			pre.at = r.sent
		}
		if r.err != nil || !b.waits.endPreAgain(name, owner, pre) {
			b.revoke(ctx, lease)
		}
	}
	take := []clientv3.Op{clientv3.OpPut(lk, owner, clientv3.WithLease(lease)), metaOp(mk, md, lease), clientv3.OpDelete(pk)}
	renew := []clientv3.Op{
		clientv3.OpPut(lk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease), clientv3.WithPrevKV()),
		metaOp(mk, md, lease),
		clientv3.OpDelete(pk),
	}
	// The lock is free and nobody waits, or owner's place (as its last
	// call saw it) is the first: take it in this one Txn.
	turn := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(qk), "=", 0).WithPrefix(),
	}
	if waiting {
		turn = firstInLine(lk, qk, pk, w.place)
	}
	resp, err := b.client.Txn(ctx).
		If(turn...).
		Then(take...).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(lk), "=", owner)},
			renew,
			readLine,
		)).Commit()
	if err != nil {
		keep()
		return 0, opError(ctx, "acquire", name, err)
	}
	if resp.Succeeded {
		return took(fence.Token(resp.Header.Revision))
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		prev := inner.Responses[0].GetResponsePut().GetPrevKv()
		if prev == nil {
			return 0, fmt.Errorf("fencekit/etcd: acquire %q: the renewing Txn returned no previous key", name)
		}
		if old := clientv3.LeaseID(prev.Lease); old != lease && old != clientv3.NoLease {
			b.revoke(ctx, old)
		}
		return took(fence.Token(prev.CreateRevision))
	}
	ln := readOf(inner.Responses)

	for attempt := 1; ; attempt++ {
		mine := ln.at(pk)
		if ln.holder == nil && attempt <= takeAttempts && (len(ln.places) == 0 || mine == 0) {
			// owner's turn: take the lock unless the line changed since.
			cmps := []clientv3.Cmp{
				clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(qk), "=", 0).WithPrefix(),
			}
			if mine == 0 {
				cmps = firstInLine(lk, qk, pk, ln.places[0].CreateRevision)
			}
			resp, err := b.client.Txn(ctx).
				If(cmps...).
				Then(take...).
				Else(readLine...).Commit()
			if err != nil {
				keep()
				return 0, opError(ctx, "acquire", name, err)
			}
			if resp.Succeeded {
				return took(fence.Token(resp.Header.Revision))
			}
			ln = readOf(resp.Responses)
			continue
		}
		// Not owner's turn: keep its place, and the lease granted ahead.
		if ahead {
			keep()
		} else {
			b.revoke(ctx, lease)
		}
		return 0, b.keepPlace(ctx, name, owner, ttl, place, ln, readLine)
	}
}

// keepPlace renews owner's place in ln (a KeepAlive of its lease), or makes
// it when owner has none or it expired, and returns the HeldError for it.
func (b *Backend) keepPlace(ctx context.Context, name, owner string, ttl, place time.Duration, ln line, readLine []clientv3.Op) error {
	pk := b.PlaceKey(name, owner)
	mine := ln.at(pk)
	if mine >= 0 {
		_, err := b.client.KeepAliveOnce(ctx, clientv3.LeaseID(ln.places[mine].Lease))
		if err == nil {
			return b.held(ctx, name, owner, ttl, ln, mine)
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return opError(ctx, "enqueue", name, err)
		}
		// The place expired after the read: queue again, at the tail.
	}
	ln, err := b.enqueue(ctx, name, owner, place, readLine)
	if err != nil {
		return err
	}
	if mine = ln.at(pk); mine < 0 {
		return fmt.Errorf("fencekit/etcd: enqueue %q: the place just made is not in the queue", name)
	}
	if ln.holder == nil && mine == 0 {
		// The line moved on while owner queued: ask again at once.
		b.dropWait(ctx, name, owner, clientv3.NoLease)
		return &driver.HeldError{Name: name, TTL: time.Millisecond}
	}
	return b.held(ctx, name, owner, ttl, ln, mine)
}

// firstInLine compares true when the lock is free and owner's place, made
// at revision place, is still there and first in line.
func firstInLine(lk, qk, pk string, place int64) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(pk), "=", place),
		// etcd has no ">=": every place was made at place or after.
		clientv3.Compare(clientv3.CreateRevision(qk), ">", place-1).WithPrefix(),
	}
}

// enqueue creates owner's place under an etcd lease of place, in a Txn that
// also reads the line, and returns that read.
func (b *Backend) enqueue(ctx context.Context, name, owner string, place time.Duration, readLine []clientv3.Op) (line, error) {
	pl, err := b.placeLease(ctx, place)
	if err != nil {
		return line{}, opError(ctx, "enqueue", name, err)
	}
	pk := b.PlaceKey(name, owner)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(pk), "=", 0)).
		Then(append([]clientv3.Op{clientv3.OpPut(pk, owner, clientv3.WithLease(pl))}, readLine...)...).
		Else(readLine...).Commit()
	if err != nil {
		return line{}, opError(ctx, "enqueue", name, err)
	}
	rs := resp.Responses
	if resp.Succeeded {
		rs = rs[1:]
	} else {
		// A concurrent call of owner's made the place: keep that one.
		b.putSpare(pl, place, time.Now())
	}
	return readOf(rs), nil
}

// readOf decodes the responses of readLine.
func readOf(rs []*etcdserverpb.ResponseOp) line {
	ln := line{places: rs[1].GetResponseRange().Kvs}
	if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
		ln.holder = kvs[0]
	}
	return ln
}

// held records what owner waits for, at place mine of ln, and returns the
// HeldError for it: with the holder's remaining TTL when owner is first.
func (b *Backend) held(ctx context.Context, name, owner string, ttl time.Duration, ln line, mine int) error {
	b.waits.sawContended(name)
	me := ln.places[mine]
	if mine > 0 {
		pred := ln.places[mine-1]
		b.waits.set(name, owner, wait{key: string(pred.Key), keyRev: pred.CreateRevision, place: me.CreateRevision, placeLease: clientv3.LeaseID(me.Lease), renewed: time.Now(), ttl: ttl})
		return &driver.HeldError{Name: name}
	}
	var holderRev int64
	if ln.holder != nil {
		holderRev = ln.holder.CreateRevision
	}
	b.waits.set(name, owner, wait{key: b.LockKey(name), keyRev: holderRev, place: me.CreateRevision, placeLease: clientv3.LeaseID(me.Lease), renewed: time.Now(), ttl: ttl})
	remaining := time.Millisecond
	if ln.holder != nil {
		ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(ln.holder.Lease))
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return opError(ctx, "enqueue", name, err)
		}
		if err == nil && ttl.TTL >= 0 {
			// Rounded up, and never past the grant.
			remaining = time.Duration(min(ttl.TTL+1, max(ttl.GrantedTTL, 1))) * time.Second
		}
	}
	return &driver.HeldError{Name: name, TTL: remaining}
}

// awaitTurn blocks until the key that owner's last acquireInLine of name
// left it waiting for is deleted (the place of the waiter ahead, which took
// the lock, left or expired; or the lock key, released or expired), max
// has passed, or ctx ends. It returns at once when owner is not in line.
//
// It costs no request of its own in the steady state: the Backend keeps
// one watch of name's lock key and one of its queue open while any of its
// waiters wait on name (and for lineLinger after), shared by all of them
// and by every awaitTurn call, and mirrors the line from them (a lineWatch,
// started by a watch create of each and one read). When the place ahead
// of owner's goes because that waiter took the lock, awaitTurn follows the
// line and waits on, for the new place ahead or, when owner is now first,
// for the lock key; it then grants the lease of owner's coming acquisition
// ahead (one LeaseGrant, in the background), so that the acquisition after
// the release is one Txn and a KeepAlive sent alongside. A deletion that happened before
// the watches began is caught by the read at the revision where they began,
// so no wake-up is lost.
//
// The watch needs a Client that is also a clientv3.Watcher (a
// *clientv3.Client is); with any other it waits max, at most 50 ms, so
// that the waiter polls in line.
func (b *Backend) awaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	w, ok := b.waits.get(name, owner)
	if !ok {
		return nil
	}
	watcher, ok := b.client.(clientv3.Watcher)
	if !ok {
		wctx, cancel := context.WithTimeout(ctx, min(max, pollInLine))
		defer cancel()
		<-wctx.Done()
		return ctx.Err()
	}
	lw := b.lineFor(name, watcher)
	t := &turn{
		owner: owner, pk: b.PlaceKey(name, owner),
		key: w.key, rev: w.keyRev, place: w.place,
		woken: make(chan struct{}), first: make(chan struct{}, 1),
	}
	defer lw.doneWith(t)
	lw.add(t)
	timer := time.NewTimer(max)
	defer timer.Stop()
	for {
		select {
		case <-t.woken:
			return ctx.Err()
		case <-t.first:
			b.pregrant(name, owner)
		case <-timer.C:
			if lw.quiet(t) {
				b.waits.markQuiet(name, owner, t.place, t.key, t.rev)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pregrant grants, in the background, the etcd lease of the acquisition
// owner waits for, now that it is first in line: the acquisition after the
// release then takes the lock in one Txn (one Raft write, as etcd's own
// Mutex) instead of a LeaseGrant and a Txn, and renews the lease with one
// KeepAlive (no Raft write) sent alongside the Txn, so that the lock lasts
// its TTL from then. A
// lease nobody used is revoked when owner takes the lock with another,
// leaves, or stops waiting, and otherwise lapses at the end of its TTL; it
// never holds a key before its acquisition.
func (b *Backend) pregrant(name, owner string) {
	ttl, ok := b.waits.startPre(name, owner)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		defer cancel()
		at := time.Now() // before the request: the lease cannot have started earlier
		id, err := b.grant(ctx, ttl)
		if err != nil {
			id = clientv3.NoLease
		}
		if !b.waits.endPre(name, owner, preLease{id: id, at: at, ttl: ttl}) && id != clientv3.NoLease {
			b.revoke(ctx, id)
		}
	}()
}

// pollInLine is how long awaitTurn waits at most on a Client that cannot
// watch.
const pollInLine = 50 * time.Millisecond

// leaveQueue deletes owner's place in name's queue (one Txn), which wakes
// the waiter behind it. It returns nil when owner has no place.
func (b *Backend) leaveQueue(ctx context.Context, name, owner string) error {
	b.dropWait(ctx, name, owner, clientv3.NoLease)
	// A Txn, not a Delete, so that a Client that pairs a wrapped KV with a
	// Lease (see Client) needs nothing more.
	if _, err := b.client.Txn(ctx).Then(clientv3.OpDelete(b.PlaceKey(name, owner))).Commit(); err != nil {
		return opError(ctx, "leave queue", name, err)
	}
	return nil
}
