package lab

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

var redisURL = flag.String("redis-url", "redis://127.0.0.1:6379/0",
	"Redis URL for -backend redis; the run keeps its keys under a prefix of its own and deletes them afterwards")

func init() {
	RegisterBackend("redis", openRedis)
	RegisterProxied("redis", ProxiedBackend{
		Target: func() (string, error) {
			target, _, err := hostPort("redis", *redisURL, "6379")
			return target, err
		},
		// openRedis cleans up with the same client, which reconnects
		// after a cut; point it at the proxy.
		Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
			raw := *redisURL
			*redisURL = withHost(raw, proxyAddr)
			defer func() { *redisURL = raw }()
			return openRedis(ctx)
		},
	})
}

// openRedis connects to -redis-url and returns a Backend and a Store under a
// key prefix of this run's own (fencelab_ and random hex), so that runs on a
// shared server never meet. The close function deletes the run's keys and
// closes the client.
func openRedis(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
	opts, err := goredis.ParseURL(*redisURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("redis: %w", err)
	}
	prefix := "fencelab_" + runID()
	rdb := goredis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	closeFn := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The prefix is letters, digits and '_': no glob characters.
		iter := rdb.Scan(dctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(dctx) {
			_ = rdb.Unlink(dctx, iter.Val()).Err()
		}
		if err := iter.Err(); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: delete keys under %s: %v\n", prefix, err)
		}
		_ = rdb.Close()
	}
	backend := fenceredis.NewBackend(rdb, &fenceredis.BackendOptions{Prefix: prefix})
	store := fenceredis.NewStore(rdb, &fenceredis.StoreOptions{Prefix: prefix})
	return backend, store, closeFn, nil
}
