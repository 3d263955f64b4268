package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// A lock on etcd and a store that refuses a holder whose lease was taken
// over. The endpoints are a cluster's client URLs.
func Example() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: exampleEndpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("example-%d/", time.Now().UnixNano()) // your application's prefix

	locks := lock.New(fenceetcd.NewBackend(cli, &fenceetcd.BackendOptions{Prefix: prefix}), nil)
	store := fenceetcd.NewStore(cli, &fenceetcd.StoreOptions{Prefix: prefix})

	first, err := locks.TryAcquire(ctx, "report", 10*time.Second)
	if err != nil {
		panic(err)
	}
	// The first holder stalls; an operator frees the lock and a second
	// holder takes it (normally: the first lease expired).
	_ = first.Release(ctx)
	second, err := locks.TryAcquire(ctx, "report", 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer second.Release(ctx)

	fmt.Println("second token is higher:", second.Token() > first.Token())
	fmt.Println("second writes:", second.Fenced(store).Put(ctx, "report", []byte("v2")))
	err = first.Fenced(store).Put(ctx, "report", []byte("v1"))
	fmt.Println("first refused as stale:", errors.Is(err, fence.ErrStale))
	// Output:
	// second token is higher: true
	// second writes: <nil>
	// first refused as stale: true
}
