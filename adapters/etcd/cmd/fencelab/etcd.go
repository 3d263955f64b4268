package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/lock/driver"
)

var endpoints = flag.String("etcd-endpoints", "http://127.0.0.1:2379",
	"comma-separated etcd client URLs for -backend etcd; the run keeps its keys under a prefix of its own and deletes them afterwards")

func init() {
	lab.RegisterBackend("etcd", func(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
		return openEtcd(ctx, strings.Split(*endpoints, ","))
	})
	lab.RegisterProxied("etcd", lab.ProxiedBackend{
		// The proxy fronts the first member; the client then knows no
		// other, so every fault the proxy injects reaches it.
		Target: func() (string, error) {
			first := strings.Split(*endpoints, ",")[0]
			host := strings.TrimPrefix(strings.TrimPrefix(first, "http://"), "https://")
			if host == "" || strings.Contains(host, "/") {
				return "", fmt.Errorf("-faults needs -etcd-endpoints as http://host:port, not %q", first)
			}
			return host, nil
		},
		Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
			return openEtcd(ctx, []string{"http://" + proxyAddr})
		},
	})
}

// openEtcd connects to eps and returns a Backend and a Store under a prefix
// of this run's own. The close function deletes the run's keys and closes
// the client.
func openEtcd(ctx context.Context, eps []string) (driver.Backend, fence.Store, func(), error) {
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, nil, nil, err
	}
	prefix := "fencelab/" + hex.EncodeToString(id[:]) + "/"
	cl, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("etcd: %w", err)
	}
	if _, err := cl.Get(ctx, prefix+"ping"); err != nil {
		_ = cl.Close()
		return nil, nil, nil, fmt.Errorf("etcd at %s: %w", strings.Join(eps, ","), err)
	}
	closeFn := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cl.Delete(dctx, prefix, clientv3.WithPrefix()); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: delete keys under %s: %v\n", prefix, err)
		}
		_ = cl.Close()
	}
	backend := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix})
	store := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: prefix})
	return backend, store, closeFn, nil
}
