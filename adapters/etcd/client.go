package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Client is the part of *clientv3.Client that a Backend and a Store use:
// transactions and reads, and for a Backend the lease calls. A
// *clientv3.Client satisfies it, and so does a struct that pairs a wrapped KV
// (namespace.NewKV, say) with a Lease.
type Client interface {
	Txn(ctx context.Context) clientv3.Txn
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error)
	Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error)
	TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error)
	KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

var _ Client = (*clientv3.Client)(nil)
