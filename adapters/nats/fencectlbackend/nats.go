// Package fencectlbackend is fencectl's NATS JetStream KV backend:
// imported for its init, it adds --backend nats to the one fencectl
// binary, cmd/fencectl:
//
//	fencectl --nats-url nats://127.0.0.1:4222 --nats-bucket locks list
//	FENCEKIT_NATS_URL=nats://a:4222,nats://b:4222 FENCEKIT_NATS_BUCKET=locks fencectl watch jobs/
//	fencectl --nats-url nats://127.0.0.1:4222 --nats-bucket locks --nats-store-bucket data fence invoice/42
//
// --nats-bucket (or FENCEKIT_NATS_BUCKET) names the KV bucket of the
// leases, --nats-store-bucket (or FENCEKIT_NATS_STORE_BUCKET) the fenced
// store's: the bucket arguments of the adapter's NewBackend and NewStore.
// fencectl cannot tell where the store lives, so fence and release --fence
// refuse without --nats-store-bucket rather than look in the lease bucket
// (name the lease bucket again when the store shares it). --prefix and
// --store-prefix are BackendOptions.Prefix and StoreOptions.Prefix
// (DefaultPrefix when not given). inspect, list, fence, release --force and
// watch work as on the other backends. bump --by N, after restoring the
// lease bucket, runs Backend.Bump: it purges the lease bucket and raises its
// stream sequence by N, so that every new token is above every earlier one;
// it refuses (exit 2, nothing changed) a bucket that holds anything but
// leases, such as the store's records (docs/operations.md, "After a
// restore").
//
// It lives in the NATS adapter's module so that the root module's graph
// never holds nats.go; it has no API of its own.
package fencectlbackend

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

// noStore is why fence and release --fence refuse without a store bucket.
const noStore = "NATS keeps the fenced store in a KV bucket that fencectl cannot guess: name it with --" +
	storeBucketFlag + " (or $" + storeBucketEnv + "), the lease bucket's name again if the store shares it"

func init() {
	fencectl.Register(fencectl.Kind{
		Name:  "nats",
		Title: "NATS JetStream KV",
		Flag:  "nats-url",
		Env:   "FENCEKIT_NATS_URL",
		Help:  "NATS: comma-separated server URLs (nats-server 2.11 or later)",
		Flags: []fencectl.KindFlag{
			{Name: bucketFlag, Env: bucketEnv, Help: "NATS: KV bucket of the leases (NewBackend's bucket); needed"},
			{Name: storeBucketFlag, Env: storeBucketEnv, Help: "NATS: KV bucket of the fenced store (NewStore's bucket), the lease bucket again if shared;\nneeded by fence and release --fence"},
		},
		Prefixes:      true,
		DefaultPrefix: fencenats.DefaultPrefix,
		Open:          openNats,
	})
}

// openNats connects to the servers at o.Addr and opens the Backend and, when
// its bucket is named, the Store, which checks that the server answers and
// that the buckets exist.
func openNats(ctx context.Context, o fencectl.Options) (*fencectl.Target, error) {
	lockBucket, storeBucket := o.Flags[bucketFlag], o.Flags[storeBucketFlag]
	if lockBucket == "" {
		return nil, fence.Invalid("--backend nats needs --%s or %s", bucketFlag, bucketEnv)
	}
	prefix, storePrefix := o.Prefix, o.StorePrefix
	if !o.PrefixSet {
		prefix = fencenats.DefaultPrefix
	}
	if !o.StorePrefixSet {
		storePrefix = fencenats.DefaultPrefix
	}
	nc, err := natsgo.Connect(o.Addr, natsgo.Name("fencectl"), natsgo.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", o.Addr, err)
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
	t := &fencectl.Target{
		Backend:     b,
		NoStore:     noStore,
		List:        b.List,
		PermitNames: b.PermitNames,
		Waiters:     b.Waiters,
		Bump: func(ctx context.Context, by int64) (fencectl.BumpResult, error) {
			return bumpNats(ctx, b, lockBucket, by)
		},
		Close: nc.Close,
	}
	if storeBucket != "" {
		s, err := fencenats.NewStore(ctx, js, storeBucket, &fencenats.StoreOptions{Prefix: storePrefix})
		if err != nil {
			nc.Close()
			return nil, err
		}
		t.Store = s
		t.StoreAt = fmt.Sprintf("NATS bucket %q, key prefix %q (--%s, --store-prefix)", storeBucket, storePrefix, storeBucketFlag)
	}
	return t, nil
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
