package etcd

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// permitWaits holds, for each (name, owner) in a permit line, the revision
// of the read on which its last acquirePermit refused it: awaitPermit
// watches from the revision after it, so that a release, expiry or
// departure that came after that read wakes owner even when it came before
// awaitPermit began.
type permitWaits struct {
	mu sync.Mutex
	m  map[[2]string]int64
}

// maxPermitWaits bounds the waits kept: a waiter that gives up without
// leavePermitLine leaves its entry behind. Forgetting one only makes that
// owner's next awaitPermit return at once.
const maxPermitWaits = 4096

func (w *permitWaits) set(name, owner string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m) >= maxPermitWaits {
		w.m = map[[2]string]int64{}
	}
	w.m[[2]string{name, owner}] = rev
}

func (w *permitWaits) get(name, owner string) (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rev, ok := w.m[[2]string{name, owner}]
	return rev, ok
}

func (w *permitWaits) drop(name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, [2]string{name, owner})
}

// awaitPermit blocks until a key of name is deleted after the read on which
// owner's last acquirePermit refused it (a permit released or expired, a
// place taken up, left or expired: each may let owner in), max has passed,
// or ctx ends. It returns at once when owner is not in name's line.
//
// It is one watch of the name's keys, deletions only, for this call: a
// watch create and, at the end, a cancel on the client's shared watch
// stream. The watch starts now, not at that read (a watch from a past
// revision waits for etcd's catch-up loop, which runs every 100 ms); when
// the cluster's revision moved on since the read, one read-only Txn
// compares the name's keys at the read's revision and at the watch's
// start, and a key gone or made anew in between wakes owner at once, so no
// wake-up is lost. When the watch breaks (no leader) or the read's
// revision was compacted, it returns early and the waiter asks again. On a
// Client that cannot watch it waits max, at most 50 ms.
func (b *Backend) awaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	rev, ok := b.permitWaits.get(name, owner)
	if !ok {
		return nil
	}
	watcher, ok := b.client.(clientv3.Watcher)
	if !ok {
		max = min(max, pollInLine)
	}
	wctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	if !ok {
		<-wctx.Done()
		return ctx.Err()
	}
	pk := b.PermitKey(name)
	wch := watcher.Watch(clientv3.WithRequireLeader(wctx), pk,
		clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	created := false
	for {
		select {
		case wr, open := <-wch:
			if !open || wr.Err() != nil || wr.Canceled || len(wr.Events) > 0 {
				return ctx.Err()
			}
			if wr.Created && !created {
				created = true
				if r0 := wr.Header.Revision; r0 > rev && b.deletedBetween(wctx, pk, rev, r0) {
					return ctx.Err()
				}
			}
		case <-wctx.Done():
			return ctx.Err()
		}
	}
}

// deletedBetween reports whether a key under pk that existed at revision
// from was deleted by revision to (gone, or made anew); true too when the
// read fails, so that the waiter asks again rather than miss its turn.
func (b *Backend) deletedBetween(ctx context.Context, pk string, from, to int64) bool {
	resp, err := b.client.Txn(ctx).Then(
		clientv3.OpGet(pk, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(from)),
		clientv3.OpGet(pk, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(to)),
	).Commit()
	if err != nil {
		return true
	}
	now := map[string]int64{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		now[string(kv.Key)] = kv.CreateRevision
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if now[string(kv.Key)] != kv.CreateRevision {
			return true
		}
	}
	return false
}
