package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// admits applies the admission rule to v for owner's request, with ahead
// the places before owner's.
func admits(v permitView, req driver.Request, limit int, ahead []*mvccpb.KeyValue) (bool, error) {
	switch req.Kind {
	case driver.Semaphore:
		return len(v.holders)+len(ahead) < limit, nil
	case driver.Write:
		return len(v.holders) == 0 && len(ahead) == 0, nil
	}
	for _, h := range v.holders {
		k, _, err := parseHolder(h)
		if err != nil {
			return false, err
		}
		if k == driver.Write {
			return false, nil
		}
	}
	for _, p := range ahead {
		if placeKind(p) == driver.Write {
			return false, nil
		}
	}
	return true, nil
}

// acquirePermit takes a permit of kind req.Kind on req.Name for req.Owner,
// or keeps owner's place in line when req.Place > 0, by the rules of the
// driver contract (see lock/driver).
//
// It reads every key of the name in one read-only Txn, decides there, and
// writes with one Txn that compares the guard key's mod revision with the
// one read: every grant and every new place rewrites the guard, so two
// writes decided on the same read cannot both land, while a permit or place
// that expired or left since the read only frees room. A lost compare reads
// again, for as long as ctx allows. A grant is three requests (the read, a
// LeaseGrant for req.TTL rounded up to whole seconds, the Txn); its token is
// the revision of that Txn, the holder key's create revision. A refusal with
// Place 0 is the read alone; with a place, the read and a KeepAlive of the
// place's lease, or a new place's lease and a Txn.
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	a := &permitAcquire{b: b, name: req.Name, owner: req.Owner, req: req, k: b.permitKeys(req.Name, req.Owner)}
	defer a.dropLease(ctx)
	for {
		p, done, err := a.attempt(ctx)
		if done || err != nil {
			return p, err
		}
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, err
		}
	}
}

// permitAcquire is one acquirePermit call, over its attempts.
type permitAcquire struct {
	b           *Backend
	name, owner string
	req         driver.Request
	k           permitKeys
	// lease is the permit's etcd lease, granted at leaseAt, kept across
	// attempts that lost their compare; 0 when none or used.
	lease   clientv3.LeaseID
	leaseAt time.Time
}

// dropLease revokes the lease no attempt used.
func (a *permitAcquire) dropLease(ctx context.Context) {
	if a.lease != clientv3.NoLease {
		a.b.revoke(ctx, a.lease)
	}
}

// permitLease returns the call's lease, granting it (again when it has aged
// past half the TTL over lost compares).
func (a *permitAcquire) permitLease(ctx context.Context) (clientv3.LeaseID, error) {
	if a.lease != clientv3.NoLease && time.Since(a.leaseAt) < a.req.TTL/2 {
		return a.lease, nil
	}
	a.dropLease(ctx)
	a.lease = clientv3.NoLease
	at := time.Now()
	id, err := a.b.grant(ctx, a.req.TTL)
	if err != nil {
		return 0, err
	}
	a.lease, a.leaseAt = id, at
	return id, nil
}

// attempt reads the name and acts on it once; done is false when a compare
// was lost and the caller should read again.
func (a *permitAcquire) attempt(ctx context.Context) (p driver.Grant, done bool, err error) {
	b, name, req, k := a.b, a.name, a.req, a.k
	v, err := b.readPermits(ctx, k)
	if err != nil {
		return driver.Grant{}, true, opError(ctx, "acquire permit", name, err)
	}
	kind, limit, err := v.shape()
	if err != nil {
		return driver.Grant{}, true, err
	}
	if v.live() && kind != 0 && !driver.SameShape(kind, limit, req) {
		return driver.Grant{}, true, driver.ShapeMismatch(name, kind, limit, req)
	}
	if !v.live() || kind == 0 {
		limit = req.Limit
	}
	if h := find(v.holders, k.holder); h >= 0 {
		return a.renew(ctx, v, v.holders[h])
	}
	mine := find(v.places, k.place)
	ahead := v.places
	if mine >= 0 {
		ahead = v.places[:mine]
	}
	ok, err := admits(v, req, limit, ahead)
	if err != nil {
		return driver.Grant{}, true, err
	}
	if ok {
		return a.grant(ctx, v, mine)
	}
	if req.Place == 0 {
		return driver.Grant{}, true, a.held()
	}
	if mine >= 0 {
		return a.keepPlace(ctx, v, v.places[mine])
	}
	return a.makePlace(ctx, v)
}

// guardCmp compares true while the guard is as v read it.
func (v permitView) guardCmp(k permitKeys) clientv3.Cmp {
	if v.guard == nil {
		return clientv3.Compare(clientv3.CreateRevision(k.guard), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(k.guard), "=", v.guard.ModRevision)
}

// grant writes owner's permit, the guard (and the last writer for a write
// permit), and deletes owner's place, if the guard and owner's place are
// as v read them.
func (a *permitAcquire) grant(ctx context.Context, v permitView, mine int) (driver.Grant, bool, error) {
	b, k := a.b, a.k
	lease, err := a.permitLease(ctx)
	if err != nil {
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	placeRev := int64(0)
	if mine >= 0 {
		placeRev = v.places[mine].CreateRevision
	}
	ops := []clientv3.Op{
		clientv3.OpPut(k.holder, holderValue(a.req.Kind, v.lastW), clientv3.WithLease(lease)),
		clientv3.OpPut(k.guard, shapeValue(a.req)),
		clientv3.OpDelete(k.place),
	}
	if a.req.Kind == driver.Write {
		ops = append(ops, clientv3.OpPut(k.writer, ""))
	}
	resp, err := b.client.Txn(ctx).If(
		v.guardCmp(k),
		clientv3.Compare(clientv3.CreateRevision(k.place), "=", placeRev),
		clientv3.Compare(clientv3.CreateRevision(k.holder), "=", 0),
	).Then(ops...).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			a.lease = clientv3.NoLease // lapsed before the Txn: grant again
			return driver.Grant{}, false, nil
		}
		// The Txn may have landed: leave the lease to hold the permit,
		// which a retry by owner then finds and renews.
		a.lease = clientv3.NoLease
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	if !resp.Succeeded {
		return driver.Grant{}, false, nil
	}
	a.lease = clientv3.NoLease
	// Owner's place lease, holding no key now, lapses by itself.
	b.permitWaits.drop(a.name, a.owner)
	return driver.Grant{Token: fence.Token(resp.Header.Revision), PriorWriter: v.lastW}, true, nil
}

// renew moves owner's live permit h to a new lease of req.TTL and deletes
// owner's place: a retried acquire gets the same permit back.
func (a *permitAcquire) renew(ctx context.Context, v permitView, h *mvccpb.KeyValue) (driver.Grant, bool, error) {
	b, k := a.b, a.k
	kind, prior, err := parseHolder(h)
	if err != nil {
		return driver.Grant{}, true, err
	}
	if kind != a.req.Kind {
		have, limit, _ := v.shape()
		return driver.Grant{}, true, driver.ShapeMismatch(a.name, have, limit, a.req)
	}
	lease, err := a.permitLease(ctx)
	if err != nil {
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.holder), "=", h.CreateRevision)).
		Then(
			clientv3.OpPut(k.holder, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease)),
			clientv3.OpDelete(k.place),
		).Commit()
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			a.lease = clientv3.NoLease
			return driver.Grant{}, false, nil
		}
		a.lease = clientv3.NoLease
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	if !resp.Succeeded {
		return driver.Grant{}, false, nil // it expired since the read
	}
	a.lease = clientv3.NoLease
	b.permitWaits.drop(a.name, a.owner)
	if old := clientv3.LeaseID(h.Lease); old != lease && old != clientv3.NoLease {
		b.revoke(ctx, old)
	}
	return driver.Grant{Token: fence.Token(h.CreateRevision), PriorWriter: prior}, true, nil
}

// keepPlace renews owner's place p (a KeepAlive of its lease), moving it to
// a lease of req.Place when its lease was granted for another TTL.
func (a *permitAcquire) keepPlace(ctx context.Context, v permitView, p *mvccpb.KeyValue) (driver.Grant, bool, error) {
	b, k := a.b, a.k
	old := clientv3.LeaseID(p.Lease)
	ka, err := b.client.KeepAliveOnce(ctx, old)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return driver.Grant{}, false, nil // it expired since the read: queue again
	}
	if err != nil {
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	if ka.TTL != max(leaseSeconds(a.req.Place), b.minSeconds.Load()) {
		pl, err := b.grant(ctx, a.req.Place)
		if err != nil {
			return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
		}
		resp, err := b.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(k.place), "=", p.CreateRevision)).
			Then(clientv3.OpPut(k.place, "", clientv3.WithIgnoreValue(), clientv3.WithLease(pl))).
			Commit()
		if err != nil {
			return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
		}
		if !resp.Succeeded {
			b.revoke(ctx, pl)
			return driver.Grant{}, false, nil
		}
		b.revoke(ctx, old)
	}
	b.permitWaits.set(a.name, a.owner, v.rev)
	return driver.Grant{}, true, a.held()
}

// makePlace adds owner's place at the tail, rewriting the guard, so that a
// grant decided before it cannot land after it.
func (a *permitAcquire) makePlace(ctx context.Context, v permitView) (driver.Grant, bool, error) {
	b, k := a.b, a.k
	pl, err := b.placeLease(ctx, a.req.Place)
	if err != nil {
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	shape := a.req
	if kind, limit, _ := v.shape(); kind != 0 {
		shape = driver.Request{Kind: kind, Limit: limit}
	}
	resp, err := b.client.Txn(ctx).
		If(v.guardCmp(k), clientv3.Compare(clientv3.CreateRevision(k.place), "=", 0)).
		Then(
			clientv3.OpPut(k.place, kindCode(a.req.Kind), clientv3.WithLease(pl)),
			clientv3.OpPut(k.guard, shapeValue(shape)),
		).Commit()
	if err != nil {
		return driver.Grant{}, true, opError(ctx, "acquire permit", a.name, err)
	}
	if !resp.Succeeded {
		b.putSpare(pl, a.req.Place, time.Now())
		return driver.Grant{}, false, nil
	}
	b.permitWaits.set(a.name, a.owner, v.rev)
	return driver.Grant{}, true, a.held()
}

// held is the call's refusal. The name has the request's shape (or the
// call would have been refused as another), so a semaphore's refusal names
// req.Limit permits; the Limit of the other kinds is 0. TTL 0: the
// holders' remaining TTLs would cost a round trip each.
func (a *permitAcquire) held() error {
	return &driver.HeldError{Name: a.name, Kind: a.req.Kind, Permits: a.req.Limit}
}
