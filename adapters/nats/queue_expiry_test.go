package nats_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestQueueRenewedPlaceExpires: a place renewed and then left alone (its
// waiter died) still expires on the server: a renewal writes the place's
// TTL again, which a KV Update would have dropped (nats.go#1994).
func TestQueueRenewedPlaceExpires(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := direct{newBackend(t, js, natstest.Bucket(t, js, 1))}
	ctx := testkit.Context(t)
	h, dead := testkit.Owner(t), testkit.Owner(t)
	if _, err := b.AcquireOrEnqueue(ctx, "x", h, 20*time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	for range 3 { // queue, then renew twice
		if _, err := b.AcquireOrEnqueue(ctx, "x", dead, 20*time.Second, time.Second); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("AcquireOrEnqueue of a held lock: %v; want ErrHeld", err)
		}
	}
	deadline := time.Now().Add(15 * time.Second) // a 1 s place, the server's sweep, and a loaded machine
	for {
		n, err := b.Waiters(ctx, []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		if n[0] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a renewed place with a 1s TTL is still in line after 15s: the renewal dropped its TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
