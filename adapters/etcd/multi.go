package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// multiRounds bounds the Txns of one acquireSet attempt: each after the
// first is sent because a lock key changed between the previous Txn's read
// and it.
const multiRounds = 3

// acquireSet takes every lock in names for owner for ttl in one Txn, or
// none of them, with holder metadata md on each. As in acquireLock, each
// lock gets an etcd lease of its own (granted concurrently, so the grants
// cost one round trip of latency), and a lock key created by the Txn has
// the Txn's revision as its create revision, the token: above every
// revision before it, for every name. A lock owner already holds is moved
// to its new lease and keeps its token.
//
// The Txn compares every lock key with what it must be for the set to be
// taken: absent, or holding owner. The first Txn assumes every key absent;
// when that fails, its Else branch reads every lock key, and a key held by
// another owner ends the call with a *driver.HeldError for the first such
// name (in the order given; TTL 0, as acquireLock), the new leases revoked,
// nothing written. Otherwise a second Txn compares each key with the state
// just read (a third if the keys changed again). So a free set costs a
// round trip of grants (one LeaseGrant per name) and one Txn, a set with
// names owner holds one Txn more; the etcd leases that those names leave
// are revoked in the background, as acquireLock does.
//
// A set too large for the server's limit on operations in one Txn
// (--max-txn-ops, 128 by default: two per name, so 64 names, the most
// driver.MaxNames allows, fit) is refused with an error matching
// driver.ErrNotAtomic, nothing written, so that lock.Client takes the names
// in order instead.
func (b *Backend) acquireSet(ctx context.Context, names []string, owner, md string, ttl time.Duration) ([]fence.Token, error) {
	op := "acquire"
	set := fmt.Sprint(names)
	leases, err := b.grantAll(ctx, len(names), ttl)
	if err != nil {
		return nil, opError(ctx, op, set, err)
	}
	// unused revokes the new leases when no key was attached to them.
	unused := func() {
		for _, l := range leases {
			b.revoke(ctx, l)
		}
	}
	lks := make([]string, len(names))
	put := make([]clientv3.Op, 0, 2*len(names))
	read := make([]clientv3.Op, len(names))
	for i, name := range names {
		lks[i] = b.LockKey(name)
		put = append(put,
			clientv3.OpPut(lks[i], owner, clientv3.WithLease(leases[i]), clientv3.WithPrevKV()),
			metaOp(b.MetaKey(name), md, leases[i]))
		read[i] = clientv3.OpGet(lks[i])
	}
	// What each lock key must be: absent at first, then as last read.
	cmps := make([]clientv3.Cmp, len(names))
	for i, lk := range lks {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)
	}
	for round := 1; ; round++ {
		resp, err := b.client.Txn(ctx).If(cmps...).Then(put...).Else(read...).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrTooManyOps):
			unused()
			return nil, fmt.Errorf("fencekit/etcd: acquire %d names: more operations than the server takes in one Txn: %w", len(names), driver.ErrNotAtomic)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// A lease lapsed before the Txn ran, which then did nothing.
			unused()
			return nil, opError(ctx, op, set, err)
		case err != nil:
			// The Txn may have taken the set: leave the leases to hold it
			// (or to lapse), so that a retry by owner finds it.
			return nil, opError(ctx, op, set, err)
		case resp.Succeeded:
			return b.multiTokens(ctx, names, leases, resp)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			switch {
			case len(kvs) == 0:
				cmps[i] = clientv3.Compare(clientv3.CreateRevision(lks[i]), "=", 0)
			case string(kvs[0].Value) == owner:
				cmps[i] = clientv3.Compare(clientv3.Value(lks[i]), "=", owner)
			default:
				unused()
				return nil, &driver.HeldError{Name: names[i]}
			}
		}
		if round == multiRounds {
			unused()
			return nil, driver.Transient(fmt.Errorf("fencekit/etcd: acquire %s: the lock keys kept changing under %d Txns", set, multiRounds))
		}
	}
}

// multiTokens reads the tokens of a set that a Txn took: a lock key it
// created has the Txn's revision as its create revision; one owner held
// keeps its own, and the etcd lease it leaves is revoked.
func (b *Backend) multiTokens(ctx context.Context, names []string, leases []clientv3.LeaseID, resp *clientv3.TxnResponse) ([]fence.Token, error) {
	tokens := make([]fence.Token, len(names))
	for i := range names {
		prev := resp.Responses[2*i].GetResponsePut().GetPrevKv()
		if prev == nil {
			tokens[i] = fence.Token(resp.Header.Revision)
			continue
		}
		tokens[i] = fence.Token(prev.CreateRevision)
		if old := clientv3.LeaseID(prev.Lease); old != leases[i] && old != clientv3.NoLease {
			b.revoke(ctx, old) // no key is attached to it any more
		}
	}
	return tokens, nil
}

// grantAll grants n etcd leases of ttl at once; when any grant fails, it
// revokes the others and returns the first error.
func (b *Backend) grantAll(ctx context.Context, n int, ttl time.Duration) ([]clientv3.LeaseID, error) {
	leases := make([]clientv3.LeaseID, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range leases {
		wg.Go(func() { leases[i], errs[i] = b.grant(ctx, ttl) })
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			continue
		}
		for i, l := range leases {
			if errs[i] == nil {
				b.revoke(ctx, l)
			}
		}
		return nil, err
	}
	return leases, nil
}
