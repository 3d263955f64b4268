package main

import (
	"context"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
)

const natsNoBump = `bump does not apply to NATS: a token is the stream sequence of the message
that took the lock, which only the stream's leader issues and no client can
raise. A bucket restored from an older backup, or one whose servers lost
acknowledged writes (a power loss under the default sync_interval), can issue
tokens again, and fencectl has no remedy for that: prevent it with
jetstream { sync_interval: always } and do not restore a lock bucket from a
backup (docs/nats.md, "Faults: what holds").`

const (
	bucketFlag      = "nats-bucket"
	bucketEnv       = "FENCEKIT_NATS_BUCKET"
	storeBucketFlag = "nats-store-bucket"
	storeBucketEnv  = "FENCEKIT_NATS_STORE_BUCKET"
)

func init() {
	fencectl.Register(fencectl.Kind{
		Name: "nats",
		Flag: "nats-url",
		Env:  "FENCEKIT_NATS_URL",
		Help: "NATS: comma-separated server URLs (nats-server 2.11 or later); the KV buckets are --" + bucketFlag +
			" (or $" + bucketEnv + ") and --" + storeBucketFlag + " (or $" + storeBucketEnv + "; default: the same bucket)",
		Open: openNats,
	})
}

// openNats connects to the servers at urls and opens the Backend and the
// Store on the buckets that run took from the command line, which checks
// that the server answers and that the buckets exist.
func openNats(ctx context.Context, urls, prefix, storePrefix string) (*fencectl.Target, error) {
	lockBucket, storeBucket := buckets.lock, buckets.store
	if lockBucket == "" {
		return nil, fence.Invalid("--backend nats needs --%s or %s", bucketFlag, bucketEnv)
	}
	if storeBucket == "" {
		storeBucket = lockBucket
	}
	nc, err := natsgo.Connect(urls, natsgo.Name("fencectl"), natsgo.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", urls, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	b, err := fencenats.NewBackend(ctx, js, lockBucket, &fencenats.BackendOptions{Prefix: prefix})
	if err != nil {
		nc.Close()
		return nil, err
	}
	s, err := fencenats.NewStore(ctx, js, storeBucket, &fencenats.StoreOptions{Prefix: storePrefix})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &fencectl.Target{
		Backend: b,
		Store:   s,
		List:    b.List,
		Waiters: b.Waiters,
		NoBump:  natsNoBump,
		Close:   nc.Close,
	}, nil
}
