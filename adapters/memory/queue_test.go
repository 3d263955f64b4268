package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// TestExpireWakesFirstWaiter: Expire, which simulates the end of a TTL,
// wakes the first waiter in line, as the waiter would have woken itself at
// the TTL; and a wake-up that came first is taken even by a zero wait.
func TestExpireWakesFirstWaiter(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	if _, err := b.Acquire(ctx, "l", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireOrEnqueue(ctx, "l", "a", time.Minute, time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("AcquireOrEnqueue = %v; want ErrHeld", err)
	}
	b.Expire("l")
	done := make(chan error, 1)
	go func() { done <- b.AwaitTurn(ctx, "l", "a", time.Minute) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Expire did not wake the first waiter")
	}
	if _, err := b.AcquireOrEnqueue(ctx, "l", "a", time.Minute, time.Minute); err != nil {
		t.Fatalf("the woken waiter: %v", err)
	}
}
