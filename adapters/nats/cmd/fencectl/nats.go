package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/fencectl"
)

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
		Bump: func(ctx context.Context, by int64) (fencectl.BumpResult, error) {
			return bumpNats(ctx, b, lockBucket, by)
		},
		Close: nc.Close,
	}, nil
}

// bumpNats runs Backend.Bump on the lease bucket: every lease in it ends
// and the stream's sequence goes up by by. A bucket that holds anything
// but leases (a Store sharing it) is refused with nothing changed, exit 2.
func bumpNats(ctx context.Context, b *fencenats.Backend, bucket string, by int64) (fencectl.BumpResult, error) {
	r, err := b.Bump(ctx, by)
	if errors.Is(err, fencenats.ErrBumpNotLeasesOnly) {
		return fencectl.BumpResult{}, fencectl.Refused(fmt.Errorf("%w; a bump purges the whole bucket, so it runs only on a bucket of leases alone: keep the fenced store in a bucket of its own (--%s), or see docs/operations.md, \"After a restore\"", err, storeBucketFlag))
	}
	if err != nil {
		return fencectl.BumpResult{}, err
	}
	return fencectl.BumpResult{
		Rows:     int64(r.Removed),
		MaxToken: r.LastSeq,
		Summary:  fmt.Sprintf("removed %d messages of bucket %s (every lease in it ended); its stream sequence is now %d, and every new token is above it", r.Removed, bucket, r.LastSeq),
	}, nil
}
