package nats_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestWaiters: Waiters counts the live places in each lock's queue, in the
// order of the names asked for, and stops counting a place once its waiter
// left or took the lock; Inspect of the lock reports the same count.
func TestWaiters(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := direct{newBackend(t, js, natstest.Bucket(t, js, 1))}
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
		if info, err := b.Inspect(ctx, "x"); err != nil || int64(info.Waiting) != want[1] {
			t.Errorf("%s: Inspect = %+v, %v; want %d waiting", what, info, err, want[1])
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

// TestInspectSeesAcknowledgedWrites: on an R3 bucket, Inspect through
// another Backend, on a connection to another server, reports every take
// and release acknowledged before it was called, although its read of the
// lock and its line may be answered by a replica: an answer older than the
// leader's last revision is asked again, and the lock key then read on the
// leader.
func TestInspectSeesAcknowledgedWrites(t *testing.T) {
	c := natstest.Triple(t)
	_, js := natstest.Connect(t, c.URLs()[:1], natsgo.IgnoreDiscoveredServers())
	_, ojs := natstest.Connect(t, c.URLs()[2:], natsgo.IgnoreDiscoveredServers())
	bucket := natstest.Bucket(t, js, 3)
	prefix := testkit.Namespace(t)
	b, other := direct{onPrefix(t, js, bucket, prefix)}, direct{onPrefix(t, ojs, bucket, prefix)}
	ctx := testkit.Context(t)
	for i := range 30 {
		o := testkit.Owner(t)
		tok, err := b.Acquire(ctx, "l", o, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := other.Inspect(ctx, "l"); err != nil || !info.Held || info.Owner != o || info.Token != tok {
			t.Fatalf("round %d: Inspect after an acknowledged take = %+v, %v; want held by %s with token %d", i, info, err, o, tok)
		}
		if err := b.Release(ctx, "l", o); err != nil {
			t.Fatal(err)
		}
		if info, err := other.Inspect(ctx, "l"); err != nil || info.Held {
			t.Fatalf("round %d: Inspect after an acknowledged release = %+v, %v; want free", i, info, err)
		}
	}
}
