package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// resume renews owner's lease on name to ttl and returns its token (the
// lock key's create revision), keeping the holder metadata. It is two round
// trips, as acquireLock: a LeaseGrant for ttl rounded up to whole seconds,
// then one Txn that, only if the lock key's value is owner, moves the key
// (and the metadata key, when there is one) to the new etcd lease and
// returns the key's previous version, whose create revision is the token.
// The owner check, the renewal and the token read are that one Txn. The key
// is rewritten in place, so its create revision, the token, stays.
//
// When owner does not hold name (no lock key: released or expired; or
// another owner's) the Txn changes nothing, the unused etcd lease is
// revoked, and the error matches driver.ErrNotHeld: resume never re-creates
// a lock key and never mints a token. The old etcd lease, now holding no
// key, is revoked in the background.
func (b *Backend) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	lease, err := b.grant(ctx, ttl)
	if err != nil {
		return 0, opError(ctx, "resume", name, err)
	}
	lk, mk := b.LockKey(name), b.MetaKey(name)
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(lk), "=", owner)).
		Then(
			clientv3.OpPut(lk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease), clientv3.WithPrevKV()),
			// The metadata key exists only when there is metadata: keep it.
			clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(mk), ">", 0)},
				[]clientv3.Op{clientv3.OpPut(mk, "", clientv3.WithIgnoreValue(), clientv3.WithLease(lease))},
				nil,
			),
		).Commit()
	if err != nil {
		// The Txn may have landed: the key then sits on the new lease,
		// which a retry by owner moves again.
		return 0, opError(ctx, "resume", name, err)
	}
	if !resp.Succeeded {
		b.revoke(ctx, lease)
		return 0, driver.NotHeld(name)
	}
	prev := resp.Responses[0].GetResponsePut().GetPrevKv()
	if prev == nil {
		return 0, fmt.Errorf("fencekit/etcd: resume %q: the Txn returned no previous key", name)
	}
	if old := clientv3.LeaseID(prev.Lease); old != lease && old != clientv3.NoLease {
		b.revoke(ctx, old) // no key is attached to it any more
	}
	return fence.Token(prev.CreateRevision), nil
}
