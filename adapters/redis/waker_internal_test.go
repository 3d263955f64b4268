package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestWakerSubscribesOnlyWhileWaiting: a Backend subscribes to its wake-up
// channel when a waiter first waits, stays subscribed while waiters come and
// go, and unsubscribes (closing its pub/sub connection) once nobody has
// waited for the linger period (30 s; 100 ms here).
func TestWakerSubscribesOnlyWhileWaiting(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testkit.Context(t)
	b := NewBackend(c, &BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	b.waker.linger = 100 * time.Millisecond
	subscribers := func() int64 {
		n, err := c.PubSubNumSub(ctx, b.WakeChannel()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[b.WakeChannel()]
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	waiter := driver.Claim{Name: "l", Owner: "w", Kind: driver.Exclusive}
	if _, err := b.acquireLock(ctx, "l", "holder", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acquireInLine(ctx, "l", "w", time.Minute, time.Minute, ""); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("acquireInLine = %v; want ErrHeld", err)
	}
	if n := subscribers(); n != 0 {
		t.Fatalf("%d subscribers before anyone waited; want 0", n)
	}
	// The first wait subscribes and returns once the server confirmed it.
	if err := b.Await(ctx, waiter, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscribers while a waiter waits; want 1", n)
	}
	// A release now reaches the waiter.
	woken := make(chan error, 1)
	go func() { woken <- b.Await(ctx, waiter, 10*time.Second) }()
	if err := b.releaseLock(ctx, "l", "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woken:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the release did not wake the waiter")
	}
	if _, err := b.acquireInLine(ctx, "l", "w", time.Minute, time.Minute, ""); err != nil {
		t.Fatalf("the woken waiter: %v", err)
	}
	eventually("unsubscribing after the linger", func() bool { return subscribers() == 0 })
	if err := b.releaseLock(ctx, "l", "w"); err != nil {
		t.Fatal(err)
	}
}
