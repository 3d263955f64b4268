package nats_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestWaiters: Waiters counts the live places in each lock's queue, in the
// order of the names asked for, and stops counting a place once its waiter
// left or took the lock.
func TestWaiters(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := newBackend(t, js, natstest.Bucket(t, js, 1))
	ctx := testkit.Context(t)
	const ttl, place = 20 * time.Second, 20 * time.Second
	h, a, c := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	if _, err := b.AcquireOrEnqueue(ctx, "x", h, ttl, place); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{a, c} {
		if _, err := b.AcquireOrEnqueue(ctx, "x", o, ttl, place); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("AcquireOrEnqueue of a held lock: %v; want ErrHeld", err)
		}
	}
	check := func(what string, want ...int64) {
		t.Helper()
		got, err := b.Waiters(ctx, []string{"free", "x"})
		if err != nil {
			t.Fatalf("%s: Waiters: %v", what, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: Waiters = %v; want %v", what, got, want)
		}
	}
	check("two in line", 0, 2)
	if err := b.LeaveQueue(ctx, "x", c); err != nil {
		t.Fatal(err)
	}
	check("one left", 0, 1)
	if err := b.Release(ctx, "x", h); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireOrEnqueue(ctx, "x", a, ttl, place); err != nil {
		t.Fatalf("AcquireOrEnqueue by the only waiter of a free lock: %v", err)
	}
	check("the waiter took the lock", 0, 0)
}
