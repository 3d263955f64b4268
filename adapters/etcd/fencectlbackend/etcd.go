// Package fencectlbackend is fencectl's etcd backend: imported for its
// init, it adds --backend etcd (--etcd-endpoints, or
// FENCEKIT_ETCD_ENDPOINTS) to the one fencectl binary, cmd/fencectl. It
// lives in the etcd adapter's module so that the root module's graph never
// holds etcd's client; it has no API of its own.
//
// inspect, list, fence, release --force and watch work as on the other
// backends, with --prefix and --store-prefix as the adapter's
// BackendOptions.Prefix and StoreOptions.Prefix (DefaultPrefix, "fencekit/",
// when not given). bump refuses: an etcd token is a revision, which a
// client raises only by one per write; restore a snapshot with etcdutl
// snapshot restore --bump-revision N --mark-compacted instead
// (docs/operations.md, "After a restore").
package fencectlbackend

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

func init() {
	fencectl.Register(fencectl.Kind{
		Name:          "etcd",
		Title:         "etcd",
		Flag:          "etcd-endpoints",
		Env:           "FENCEKIT_ETCD_ENDPOINTS",
		Help:          "etcd: comma-separated client URLs",
		Prefixes:      true,
		DefaultPrefix: fenceetcd.DefaultPrefix,
		Open:          openEtcd,
	})
}

// openEtcd connects to the comma-separated endpoints and checks that the
// cluster answers.
func openEtcd(ctx context.Context, o fencectl.Options) (*fencectl.Target, error) {
	prefix, storePrefix := o.Prefix, o.StorePrefix
	if !o.PrefixSet {
		prefix = fenceetcd.DefaultPrefix
	}
	if !o.StorePrefixSet {
		storePrefix = fenceetcd.DefaultPrefix
	}
	eps := strings.Split(o.Addr, ",")
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	if _, err := cl.Get(ctx, prefix+"lock/"); err != nil {
		_ = cl.Close()
		return nil, fmt.Errorf("cannot reach etcd at %s: %w", o.Addr, err)
	}
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix})
	return &fencectl.Target{
		Backend:     b,
		Store:       fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: storePrefix}),
		StoreAt:     fmt.Sprintf("etcd, key prefix %q (--store-prefix)", storePrefix),
		List:        b.List,
		PermitNames: b.PermitNames,
		Waiters:     b.Waiters,
		NoBump:      etcdNoBump,
		Close:       func() { _ = cl.Close() },
	}, nil
}
