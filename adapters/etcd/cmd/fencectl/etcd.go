package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/fencectl"
)

const etcdNoBump = `bump does not apply to etcd: a token is the lock key's create revision, and
a client raises the cluster's revision only by one per write. After restoring a
snapshot, tokens issued since it was taken would be issued again: restore every
member with etcdutl snapshot restore --bump-revision N --mark-compacted, with N
above the writes made since the snapshot (docs/operations.md, "After a restore").`

// fencectl's --prefix and --store-prefix default to Redis's "fencekit";
// the etcd adapter's default prefix is "fencekit/", and its keys start
// with the prefix as it is.
const redisDefaultPrefix = "fencekit"

func init() {
	fencectl.Register(fencectl.Kind{
		Name: "etcd",
		Flag: "etcd-endpoints",
		Env:  "FENCEKIT_ETCD_ENDPOINTS",
		Help: "etcd: comma-separated client URLs",
		Open: openEtcd,
	})
}

// openEtcd connects to the comma-separated endpoints and checks that the
// cluster answers.
func openEtcd(ctx context.Context, endpoints, prefix, storePrefix string) (*fencectl.Target, error) {
	if prefix == redisDefaultPrefix {
		prefix = fenceetcd.DefaultPrefix
	}
	if storePrefix == redisDefaultPrefix {
		storePrefix = fenceetcd.DefaultPrefix
	}
	eps := strings.Split(endpoints, ",")
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	if _, err := cl.Get(ctx, prefix+"lock/"); err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", endpoints, err)
	}
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix})
	return &fencectl.Target{
		Backend: b,
		Store:   fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: storePrefix}),
		List:    b.List,
		Waiters: b.Waiters,
		NoBump:  etcdNoBump,
		Close:   func() { _ = cl.Close() },
	}, nil
}
