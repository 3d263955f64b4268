package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/exampletest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// A holder pauses past its lease; the next holder takes over and writes; the
// first one wakes up and writes too. The Store refuses the late write,
// because it carries the older token.
func Example() {
	ctx := context.Background()
	rdb := goredis.NewClient(exampleOpts) // e.g. &goredis.Options{Addr: "127.0.0.1:6379"}
	defer rdb.Close()

	backend := fenceredis.NewBackend(rdb, &fenceredis.BackendOptions{Prefix: exampleNamespace})
	store := fenceredis.NewStore(rdb, &fenceredis.StoreOptions{Prefix: exampleNamespace})
	locks := lock.New(backend, nil)
	defer rdb.Del(ctx, backend.LeaseKey("report"), backend.CounterKey("report"), store.Key("report"))

	a, err := locks.TryAcquire(ctx, "report", 250*time.Millisecond) // short, but with margin for a loaded machine
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("A writes:", a.Fenced(store).Put(ctx, "report", []byte("draft by A")))

	// A stalls (a GC pause, a slow call). B waits for A's lease to run out.
	b, err := locks.Acquire(ctx, "report", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Release(ctx)
	fmt.Println("B's token is newer:", b.Token() > a.Token())
	fmt.Println("B writes:", b.Fenced(store).Put(ctx, "report", []byte("final by B")))

	// A wakes up, still believing it holds the lock.
	err = a.Fenced(store).Put(ctx, "report", []byte("late edit by A"))
	fmt.Println("A's late write is stale:", errors.Is(err, fence.ErrStale))

	rec, err := store.Get(ctx, "report")
	fmt.Printf("stored: %q, fenced at B's token: %v, err: %v\n", rec.Value, rec.Fence == b.Token(), err)
	// Output:
	// A writes: <nil>
	// B's token is newer: true
	// B writes: <nil>
	// A's late write is stale: true
	// stored: "final by B", fenced at B's token: true, err: <nil>
}

// Where a lock's lease and token counter live. Both keys carry the hash tag
// {name}, so each script touches one cluster slot.
func ExampleBackend_LeaseKey() {
	b := fenceredis.NewBackend(nil, &fenceredis.BackendOptions{Prefix: "app"})
	s := fenceredis.NewStore(nil, &fenceredis.StoreOptions{Prefix: "app"})
	fmt.Println(b.LeaseKey("invoices"))
	fmt.Println(b.CounterKey("invoices"))
	fmt.Println(s.Key("invoice/42"))
	fmt.Println(b.LeaseKey("odd}{name"))
	// Output:
	// app:{invoices}:lease
	// app:{invoices}:counter
	// app:{invoice/42}
	// app:{odd%7D%7Bname}:lease
}

// On Redis Cluster, pass a ClusterClient. With WaitReplicas, an acquisition
// counts only once that many replicas of the lock's master have it.
func ExampleNewBackend_cluster() {
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"},
	})
	defer rdb.Close()

	backend := fenceredis.NewBackend(rdb, &fenceredis.BackendOptions{
		Prefix:       "app",
		WaitReplicas: 1,
		WaitTimeout:  200 * time.Millisecond,
	})
	locks := lock.New(backend, nil)

	err := locks.Do(context.Background(), "nightly-rebuild", 30*time.Second, func(ctx context.Context, lease *lock.Lease) error {
		// ... work, writing through lease.Fenced(store) ...
		return nil
	})
	if errors.Is(err, fenceredis.ErrReplication) {
		fmt.Println("the lock was not replicated in time; nothing is held")
	}
}

// TestExamplesTwice runs every example twice in one process and checks both
// runs' output against the Output comments: the examples clean up after
// themselves, as `go test -count=2` needs. Without a server for the examples
// it takes one from testkit.
func TestExamplesTwice(t *testing.T) {
	if exampleOpts == nil {
		opts, err := goredis.ParseURL(testkit.RedisURL(t))
		if err != nil {
			t.Fatal(err)
		}
		exampleOpts = opts
		t.Cleanup(func() { exampleOpts = nil })
	}
	exampletest.RunTwice(t, map[string]func(){
		"Example":                 Example,
		"ExampleBackend_LeaseKey": ExampleBackend_LeaseKey,
	})
}
