package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// BackendOptions configures a Backend. The zero value (or nil) means the
// defaults.
type BackendOptions struct {
	// Prefix starts every key, as it is; DefaultPrefix when empty. A lock
	// named n lives in "<prefix>lock/<n>" (its owner) and "<prefix>meta/<n>"
	// (its holder metadata, when there is any), and its waiters' places
	// in "<prefix>queue/<n>/<owner>" (see QueueKey), with '%' and '/' in n
	// and owner %-escaped. A semaphore or read-write lock named n lives
	// under "<prefix>permit/<n>/" (see PermitKey).
	Prefix string
}

// Backend is a driver.Backend on etcd: it serves every shape of lease (locks,
// queued waiting, sets, resume, semaphores and read-write locks). Each
// acquisition gets an etcd lease of its own, granted for the TTL rounded up
// to whole seconds, and the lease's keys are attached to it, so the
// cluster's leader ends the lease on its own clock whatever happens to the
// client. The token is the key's create revision. Waiters in line wait on a
// watch of the keys ahead of them, not by polling. It is safe for
// concurrent use.
type Backend struct {
	client Client
	prefix string
	// minSeconds is the server's minimum lease TTL once a grant has shown
	// it (a grant answered with a longer TTL than asked), else 0.
	minSeconds atomic.Int64
	// waits is what each waiter in line waits for (see awaitTurn).
	waits waits
	// lines are the line watches of the names its waiters wait on (see
	// awaitTurn).
	lines lines
	// spares are place leases kept for reuse (see spareLease).
	spares spares
	// permitWaits is what each waiter in a permit line waits after (see
	// awaitPermit).
	permitWaits permitWaits
}

// NewBackend returns a Backend that keeps its leases in client, normally a
// *clientv3.Client. opts may be nil.
func NewBackend(client Client, opts *BackendOptions) *Backend {
	var o BackendOptions
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	return &Backend{client: client, prefix: o.Prefix}
}

// LockKey is the key that holds the owner of name's lease. Its create
// revision is the lease's token.
func (b *Backend) LockKey(name string) string { return b.prefix + "lock/" + escapeKey(name) }

// MetaKey is the key that holds the holder metadata of name's lease.
func (b *Backend) MetaKey(name string) string { return b.prefix + "meta/" + escapeKey(name) }

// acquireLock takes name for owner and returns the lock key's create
// revision as the token, or, when owner already holds it, moves the lease to
// a fresh etcd lease of ttl and returns the same token. When another owner
// holds it, the error is a *driver.HeldError (with TTL 0: looking it up
// would cost a round trip on every refused attempt).
//
// It is two round trips: a LeaseGrant for ttl rounded up to whole seconds,
// then one Txn that takes the lock if its key does not exist, moves it to
// the new lease if owner holds it, or reads the holder. A refused attempt
// revokes the unused lease (a third round trip). The holder metadata md is
// written in the same Txn, replacing what a same-owner acquisition stored
// before.
func (b *Backend) acquireLock(ctx context.Context, name, owner, md string, ttl time.Duration) (fence.Token, error) {
	lease, err := b.grant(ctx, ttl)
	if err != nil {
		return 0, opError(ctx, "acquire", name, err)
	}
	lk, mk := b.LockKey(name), b.MetaKey(name)
	take := []clientv3.Op{clientv3.OpPut(lk, owner, clientv3.WithLease(lease)), metaOp(mk, md, lease)}
	renew := []clientv3.Op{
		clientv3.OpPut(lk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease), clientv3.WithPrevKV()),
		metaOp(mk, md, lease),
	}
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)).
		Then(take...).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(lk), "=", owner)},
			renew,
			nil,
		)).Commit()
	if err != nil {
		// The Txn may have taken the lock: leave the lease to hold it (or to
		// lapse), so that a retry by owner finds it and gets its token.
		return 0, opError(ctx, "acquire", name, err)
	}
	if resp.Succeeded {
		return fence.Token(resp.Header.Revision), nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if !inner.Succeeded {
		b.revoke(ctx, lease)
		return 0, &driver.HeldError{Name: name}
	}
	prev := inner.Responses[0].GetResponsePut().GetPrevKv()
	if prev == nil {
		return 0, fmt.Errorf("fencekit/etcd: acquire %q: the renewing Txn returned no previous key", name)
	}
	if old := clientv3.LeaseID(prev.Lease); old != lease && old != clientv3.NoLease {
		b.revoke(ctx, old) // no key is attached to it any more
	}
	return fence.Token(prev.CreateRevision), nil
}

// metaOp writes the holder metadata md under the lease, or deletes the key
// when md is empty, so that a renewing Acquire replaces what was there.
func metaOp(mk, md string, lease clientv3.LeaseID) clientv3.Op {
	if md == "" {
		return clientv3.OpDelete(mk)
	}
	return clientv3.OpPut(mk, md, clientv3.WithLease(lease))
}

// grant asks for an etcd lease of ttl rounded up to whole seconds and notes
// the server's minimum when the grant shows it.
func (b *Backend) grant(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	secs := leaseSeconds(ttl)
	resp, err := b.client.Grant(ctx, secs)
	if err != nil {
		return 0, err
	}
	if resp.TTL > secs {
		b.minSeconds.Store(resp.TTL)
	}
	return resp.ID, nil
}

// revokeTimeout bounds the revocation of a lease that holds no lock key.
const revokeTimeout = 5 * time.Second

// revoke drops a lease that holds no lock key, in the background and best
// effort, so that the call that made it useless returns without waiting one
// more round trip: if the revocation fails, the lease lapses by itself at the
// end of its TTL. It outlives ctx's cancellation (but not revokeTimeout),
// since an unused lease is worth dropping whatever became of the caller.
func (b *Backend) revoke(ctx context.Context, lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	go func() {
		defer cancel()
		_, _ = b.client.Revoke(ctx, lease)
	}()
}

// extendLock renews owner's lease on name to ttl from now. It reads the lock
// key (owner and etcd lease) and renews that etcd lease with one KeepAlive:
// two round trips, and an etcd lease that has lapsed is never renewed, so a
// lost lock is never re-created. When the lease was granted for a different
// number of seconds than ttl needs, the lock moves to a new lease in one Txn
// that checks owner (two more round trips, and a third to revoke the old
// lease).
func (b *Backend) extendLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	lk := b.LockKey(name)
	get, err := b.client.Get(ctx, lk)
	if err != nil {
		return opError(ctx, "extend", name, err)
	}
	if len(get.Kvs) == 0 || string(get.Kvs[0].Value) != owner {
		return driver.NotHeld(name)
	}
	old := clientv3.LeaseID(get.Kvs[0].Lease)
	ka, err := b.client.KeepAliveOnce(ctx, old)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return driver.NotHeld(name)
	}
	if err != nil {
		return opError(ctx, "extend", name, err)
	}
	want := max(leaseSeconds(ttl), b.minSeconds.Load())
	if ka.TTL == want {
		return nil
	}
	return b.move(ctx, name, owner, ttl, old)
}

// move attaches owner's lock on name to a new etcd lease of ttl, in one Txn
// that checks owner, and revokes the old lease.
func (b *Backend) move(ctx context.Context, name, owner string, ttl time.Duration, old clientv3.LeaseID) error {
	lease, err := b.grant(ctx, ttl)
	if err != nil {
		return opError(ctx, "extend", name, err)
	}
	lk, mk := b.LockKey(name), b.MetaKey(name)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", owner)).
		Then(
			clientv3.OpPut(lk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease)),
			// The metadata key exists only when there is metadata.
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mk), ">", 0)},
				[]clientv3.Op{clientv3.OpPut(mk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease))},
				nil,
			),
		).Commit()
	if err != nil {
		return opError(ctx, "extend", name, err)
	}
	if !resp.Succeeded {
		b.revoke(ctx, lease)
		return driver.NotHeld(name)
	}
	b.revoke(ctx, old)
	return nil
}

// releaseLock deletes name's keys in one Txn that checks owner: one round
// trip. The etcd lease, now holding no key, is left to lapse at the end of
// its TTL rather than revoked, which would cost a second round trip; the
// leader revokes it then through Raft either way.
func (b *Backend) releaseLock(ctx context.Context, name, owner string) error {
	lk := b.LockKey(name)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", owner)).
		Then(clientv3.OpDelete(lk), clientv3.OpDelete(b.MetaKey(name))).
		Commit()
	if err != nil {
		return opError(ctx, "release", name, err)
	}
	if !resp.Succeeded {
		return driver.NotHeld(name)
	}
	return nil
}

// inspectLock reports the holder of name, its token and metadata, and the
// number of places in name's queue (read together in one Txn; a place
// lives on a lease of its own, which the cluster deletes with its key, so
// every place counted is live by the server's view), and the holder's
// remaining TTL (a LeaseTimeToLive): two round trips, one when the lock is
// free. etcd reports the remaining TTL in whole seconds, rounded down, so
// the TTL is a whole number of seconds at most one second short of the
// truth; a lease with less than a second left reads as one millisecond.
func (b *Backend) inspectLock(ctx context.Context, name string) (driver.Info, error) {
	lk, mk := b.LockKey(name), b.MetaKey(name)
	for attempt := 1; ; attempt++ {
		resp, err := b.client.Txn(ctx).Then(clientv3.OpGet(lk), clientv3.OpGet(mk),
			clientv3.OpGet(b.QueueKey(name), clientv3.WithPrefix(), clientv3.WithCountOnly())).Commit()
		if err != nil {
			return driver.Info{}, opError(ctx, "inspect", name, err)
		}
		info := driver.Info{Name: name, Kind: driver.Exclusive, Waiting: int(resp.Responses[2].GetResponseRange().Count)}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return info, nil
		}
		h := driver.Holder{Owner: string(kvs[0].Value), Kind: driver.Exclusive, Token: fence.Token(kvs[0].CreateRevision)}
		if md := resp.Responses[1].GetResponseRange().Kvs; len(md) > 0 {
			h.Metadata = string(md[0].Value)
		}
		ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(kvs[0].Lease))
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return driver.Info{}, opError(ctx, "inspect", name, err)
		}
		if err != nil || ttl.TTL < 0 {
			// The lease ended after the read, and the key with it: read
			// again. A key that never had a lease (written by hand) would
			// read the same way every time.
			if attempt == 3 {
				return driver.Info{}, fmt.Errorf("fencekit/etcd: inspect %q: the lock key's lease %x does not exist", name, kvs[0].Lease)
			}
			continue
		}
		h.TTL = max(time.Duration(ttl.TTL)*time.Second, time.Millisecond)
		info.Holders = []driver.Holder{h}
		return info, nil
	}
}
