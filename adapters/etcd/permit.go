package etcd

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// extendPermit renews owner's permit on name to ttl from now: a Get of the
// holder key and a KeepAlive of its lease, two requests, as extendLock; a
// lapsed lease is never renewed, so a lost permit is never re-created.
// When the lease was granted for another number of seconds, the permit
// moves to a new lease in a Txn that checks the holder key (two more).
func (b *Backend) extendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	hk := b.permitKeys(name, owner).holder
	get, err := b.client.Get(ctx, hk)
	if err != nil {
		return opError(ctx, "extend permit", name, err)
	}
	if len(get.Kvs) == 0 {
		return driver.NotHeld(name)
	}
	h := get.Kvs[0]
	old := clientv3.LeaseID(h.Lease)
	ka, err := b.client.KeepAliveOnce(ctx, old)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return driver.NotHeld(name)
	}
	if err != nil {
		return opError(ctx, "extend permit", name, err)
	}
	if ka.TTL == max(leaseSeconds(ttl), b.minSeconds.Load()) {
		return nil
	}
	lease, err := b.grant(ctx, ttl)
	if err != nil {
		return opError(ctx, "extend permit", name, err)
	}
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(hk), "=", h.CreateRevision)).
		Then(clientv3.OpPut(hk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return opError(ctx, "extend permit", name, err)
	}
	if !resp.Succeeded {
		b.revoke(ctx, lease)
		return driver.NotHeld(name)
	}
	b.revoke(ctx, old)
	return nil
}

// releasePermit deletes owner's holder key in one Txn (one request); the
// deletion is what wakes the waiters (see awaitPermit). Its etcd lease,
// holding no key now, is left to lapse, as releaseLock leaves a lock's. The
// token counter is etcd's revision, which nothing lowers, and the last
// writer key stays.
func (b *Backend) releasePermit(ctx context.Context, name, owner string) error {
	hk := b.permitKeys(name, owner).holder
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(hk), ">", 0)).
		Then(clientv3.OpDelete(hk)).
		Commit()
	if err != nil {
		return opError(ctx, "release permit", name, err)
	}
	if !resp.Succeeded {
		return driver.NotHeld(name)
	}
	return nil
}

// leavePermitLine deletes owner's place in name's line (one Txn); its lease
// lapses by itself. nil when owner has none.
func (b *Backend) leavePermitLine(ctx context.Context, name, owner string) error {
	b.permitWaits.drop(name, owner)
	if _, err := b.client.Txn(ctx).Then(clientv3.OpDelete(b.permitKeys(name, owner).place)).Commit(); err != nil {
		return opError(ctx, "leave permit line", name, err)
	}
	return nil
}

// inspectPermits reports name's shape, live permits, places and last
// writer: one read-only Txn, and a LeaseTimeToLive for each permit (etcd
// reports whole seconds, rounded down; a permit with less than a second
// left reads as one millisecond). A permit whose lease ended after the read
// is left out.
func (b *Backend) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	k := b.permitKeys(name, "")
	v, err := b.readPermits(ctx, k)
	if err != nil {
		return driver.Info{}, opError(ctx, "inspect permits", name, err)
	}
	info := driver.Info{Name: name, Waiting: len(v.places), LastWriter: v.lastW}
	if v.live() {
		kind, limit, err := v.shape()
		if err != nil {
			return driver.Info{}, err
		}
		info.Kind, info.Limit = kind, limit
	}
	for _, h := range v.holders {
		kind, _, err := parseHolder(h)
		if err != nil {
			return driver.Info{}, err
		}
		ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(h.Lease))
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return driver.Info{}, opError(ctx, "inspect permits", name, err)
		}
		if err != nil || ttl.TTL < 0 {
			continue
		}
		info.Holders = append(info.Holders, driver.Holder{
			Owner: keyUnescaper.Replace(strings.TrimPrefix(string(h.Key), k.holders)),
			Kind:  kind,
			Token: fence.Token(h.CreateRevision),
			TTL:   max(time.Duration(ttl.TTL)*time.Second, time.Millisecond),
		})
	}
	return info, nil
}
