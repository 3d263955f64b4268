package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/lab"
	"github.com/fencekit/fencekit/lock/driver"
)

var (
	natsURL = flag.String("nats-url", "nats://127.0.0.1:4222",
		"comma-separated NATS server URLs for -backend nats (nats-server 2.11 or later); the run creates a KV bucket of its own and deletes it afterwards")
	natsReplicas = flag.Int("nats-replicas", 1, "replicas of the run's KV bucket for -backend nats")
)

func init() {
	lab.RegisterBackend("nats", func(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
		return openNats(ctx, *natsURL)
	})
	lab.RegisterProxied("nats", lab.ProxiedBackend{
		// The proxy fronts the first server, and the client ignores the
		// servers the cluster tells it about, so every fault reaches it.
		Target: func() (string, error) {
			first := strings.Split(*natsURL, ",")[0]
			u, err := url.Parse(first)
			if err != nil || u.Host == "" {
				return "", fmt.Errorf("-faults needs -nats-url as nats://host:port, not %q", first)
			}
			return u.Host, nil
		},
		Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
			return openNats(ctx, "nats://"+proxyAddr, natsgo.IgnoreDiscoveredServers())
		},
	})
}

// openNats connects to urls, creates a KV bucket of this run's own (per-key
// TTLs allowed) and returns a Backend and a Store in it. The close function
// deletes the bucket and closes the connection.
func openNats(ctx context.Context, urls string, opts ...natsgo.Option) (driver.Backend, fence.Store, func(), error) {
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, nil, nil, err
	}
	bucket := "fencelab_" + hex.EncodeToString(id[:])
	opts = append([]natsgo.Option{natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := natsgo.Connect(urls, opts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nats at %s: %w", urls, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Replicas: *natsReplicas, LimitMarkerTTL: time.Second}); err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("nats: create bucket %s (per-key TTL needs nats-server 2.11 or later): %w", bucket, err)
	}
	closeFn := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteKeyValue(dctx, bucket); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: delete bucket %s: %v\n", bucket, err)
		}
		nc.Close()
	}
	backend, err := fencenats.NewBackend(ctx, js, bucket, nil)
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	store, err := fencenats.NewStore(ctx, js, bucket, nil)
	if err != nil {
		closeFn()
		return nil, nil, nil, err
	}
	return backend, store, closeFn, nil
}
