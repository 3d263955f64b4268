package etcd_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestWaiters backs Waiters' doc: it counts the places standing in each
// named queue, in the order of the names, 0 for a lock nobody waits for,
// one fewer after a waiter leaves, across batches of names, and it does not
// count the queue of a name that only starts with another's (names are
// escaped in keys). Inspect's Waiting counts the same.
func TestWaiters(t *testing.T) {
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(sharedClient(t), &fenceetcd.BackendOptions{Prefix: prefix(t)})
	const ttl, place = 10 * time.Second, 10 * time.Second
	if _, err := enqueue(ctx, b, "jobs/a", testkit.Owner(t), ttl, place); err != nil {
		t.Fatalf("enqueue of a free lock: %v", err)
	}
	var waiters []string
	for range 3 {
		w := testkit.Owner(t)
		if _, err := enqueue(ctx, b, "jobs/a", w, ttl, place); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
		}
		waiters = append(waiters, w)
	}
	if _, err := enqueue(ctx, b, "jobs/a/b", testkit.Owner(t), ttl, place); err != nil {
		t.Fatalf("enqueue of a free lock: %v", err)
	}

	names := []string{"jobs/a", "jobs/free", "jobs/a/b"}
	check := func(want []int64) {
		t.Helper()
		got, err := b.Waiters(ctx, names)
		if err != nil {
			t.Fatalf("Waiters: %v", err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Waiters = %v; want %v", got, want)
		}
		for i, name := range names {
			info, err := inspect(ctx, b, name)
			if err != nil || int64(info.Waiting) != want[i] {
				t.Fatalf("Inspect(%s) = %+v, %v; want %d waiting, as Waiters counts", name, info, err, want[i])
			}
		}
	}
	check([]int64{3, 0, 0})
	if err := leave(ctx, b, "jobs/a", waiters[1]); err != nil {
		t.Fatalf("leave: %v", err)
	}
	check([]int64{2, 0, 0})

	// More names than one Txn may carry: the counts still line up.
	many := make([]string, 130)
	for i := range many {
		many[i] = fmt.Sprintf("jobs/free/%d", i)
	}
	many[129] = "jobs/a"
	got, err := b.Waiters(ctx, many)
	if err != nil || len(got) != len(many) || got[129] != 2 || got[0] != 0 {
		t.Fatalf("Waiters of %d names = %v, %v; want %d counts, the last 2", len(many), got, err, len(many))
	}

	if got, err := b.Waiters(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("Waiters(nil) = %v, %v; want none", got, err)
	}
}
