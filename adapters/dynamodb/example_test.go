package dynamodb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// The recipe for a Go service: one table for the locks and the fenced
// data (Migrate makes it), a Backend and a Store on it, a lock.Client over
// the Backend, and every protected write made with the lease's token.
// client is the *dynamodb.Client the service already has (here the test
// server's; in a service, dynamodb.NewFromConfig(cfg)).
func ExampleNewBackend() {
	srv, err := dynalitetest.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	client := srv.Client()
	ctx := context.Background()
	if err := fenceddb.Migrate(ctx, client, "jobs"); err != nil {
		fmt.Println(err)
		return
	}
	run := randomPrefix() // one per run of the example; a service uses a fixed one, or none

	backend, err := fenceddb.NewBackend(client, "jobs", &fenceddb.BackendOptions{Prefix: run + "lock/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := fenceddb.NewStore(client, "jobs", &fenceddb.StoreOptions{Prefix: run + "data/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	locks := lock.New(backend, nil)

	err = locks.Do(ctx, "invoice-7", 10*time.Second, func(ctx context.Context, lease *lock.Lease) error {
		fmt.Println("token", lease.Token())
		return lease.Fenced(store).Put(ctx, "invoice-7/state", []byte("sent"))
	})
	if errors.Is(err, fence.ErrStale) {
		fmt.Println("a newer holder wrote first: nothing written")
	}
	rec, _ := store.Get(ctx, "invoice-7/state")
	fmt.Printf("%s, fence %d\n", rec.Value, rec.Fence)
	// Output:
	// token 1
	// sent, fence 1
}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:]) + "/"
}
