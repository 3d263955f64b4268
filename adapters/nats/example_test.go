package nats_test

import (
	"context"
	"log"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/lock"
)

// A lock and a fenced store on one bucket. The bucket allows per-key TTLs
// (LimitMarkerTTL), which the Backend needs. Replicas: 1 on a single server,
// which refuses more (JetStream error 10074); on a cluster of three servers
// or more, Replicas: 3 keeps the bucket through the loss of any one.
// (Compiled, not run: it needs a server.)
func Example() {
	ctx := context.Background()
	nc, err := natsgo.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "locks", Replicas: 1, LimitMarkerTTL: time.Second}); err != nil {
		log.Fatal(err)
	}
	backend, err := fencenats.NewBackend(ctx, js, "locks", nil)
	if err != nil {
		log.Fatal(err) // errors.Is(err, fencenats.ErrNoKeyTTL) before nats-server 2.11
	}
	store, err := fencenats.NewStore(ctx, js, "locks", nil)
	if err != nil {
		log.Fatal(err)
	}
	client := lock.New(backend, nil)
	err = client.Do(ctx, "report", 10*time.Second, func(ctx context.Context, l *lock.Lease) error {
		return store.Put(ctx, "report", l.Token(), []byte("done"))
	})
	if err != nil {
		log.Fatal(err)
	}
}
