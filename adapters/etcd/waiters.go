package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxTxnOps is etcd's default --max-txn-ops: a Txn may carry no more
// operations than this, so Waiters reads in batches of it.
const maxTxnOps = 128

// Waiters returns, for each of names in order, how many waiters stand in
// its queue now: the place keys under QueueKey(name). A place lives on a
// lease of its own, which the cluster deletes with its key when the waiter
// stops renewing it, so every key counted is a live place by the server's
// view. The counts are count-only range reads, up to 128 names in one Txn
// (one revision). It is meant for operators (fencectl watch), not for hot
// paths.
func (b *Backend) Waiters(ctx context.Context, names []string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	counts := make([]int64, 0, len(names))
	for start := 0; start < len(names); start += maxTxnOps {
		batch := names[start:min(start+maxTxnOps, len(names))]
		ops := make([]clientv3.Op, len(batch))
		for i, name := range batch {
			ops[i] = clientv3.OpGet(b.QueueKey(name), clientv3.WithPrefix(), clientv3.WithCountOnly())
		}
		resp, err := b.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, opError(ctx, "waiters", batch[0], err)
		}
		for _, r := range resp.Responses {
			counts = append(counts, r.GetResponseRange().Count)
		}
	}
	return counts, nil
}
