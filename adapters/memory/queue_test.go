package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestExpireWakesFirstWaiter: Expire, which simulates the end of a TTL,
// wakes the first waiter in line, as the waiter would have woken itself at
// the TTL; and a wake-up that came first is taken even by a zero wait.
func TestExpireWakesFirstWaiter(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	lockReq := driver.Request{Name: "l", Owner: "holder", TTL: time.Minute, Kind: driver.Exclusive}
	if _, err := b.Acquire(ctx, lockReq); err != nil {
		t.Fatal(err)
	}
	inLine := driver.Request{Name: "l", Owner: "a", TTL: time.Minute, Kind: driver.Exclusive, Place: time.Minute}
	if _, err := b.Acquire(ctx, inLine); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("Acquire with a place = %v; want ErrHeld", err)
	}
	b.Expire("l")
	done := make(chan error, 1)
	go func() { done <- b.Await(ctx, driver.Claim{Name: "l", Owner: "a", Kind: driver.Exclusive}, time.Minute) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Expire did not wake the first waiter")
	}
	if _, err := b.Acquire(ctx, inLine); err != nil {
		t.Fatalf("the woken waiter: %v", err)
	}
}
