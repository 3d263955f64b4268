package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// Lease.TTL answers for its own lease only: once the lease has expired on
// the backend and another owner holds the lock, the remaining TTL that the
// backend reports is the new holder's, and this lease is not held at all.

func TestLeaseTTLAfterTakeoverIsNotTheNewHolders(t *testing.T) {
	ctx := context.Background()
	mem := memory.NewBackend()
	// A long local deadline: only the backend can tell that the lease is
	// gone, so TTL has to look at who holds the lock.
	old, err := lock.New(mem, nil).TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mem.Expire("job") // the lease runs out on the backend
	newer, err := lock.New(mem, nil).TryAcquire(ctx, "job", 2*time.Minute)
	if err != nil {
		t.Fatalf("the takeover: %v", err)
	}
	defer newer.Release(ctx)

	ttl, err := old.TTL(ctx)
	if !errors.Is(err, lock.ErrNotHeld) || ttl != 0 {
		t.Fatalf("old lease's TTL = %v, %v; want 0 and ErrNotHeld (the new holder's TTL is not ours)", ttl, err)
	}
	if err := old.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("old lease's Err after TTL found it not held = %v; want ErrLost", err)
	}
	// The new holder's own TTL is still reported to it.
	if ttl, err := newer.TTL(ctx); err != nil || ttl <= time.Minute {
		t.Errorf("new holder's TTL = %v, %v; want its own, over a minute", ttl, err)
	}
}

func TestPermitTTLAfterTakeoverIsNotTheNewHolders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	mem := memory.NewBackend()
	const ttl = 100 * time.Millisecond
	old, err := lock.New(mem, nil).Semaphore("pool", 1).TryAcquire(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	// The other holder waits in line for the only permit, which it gets
	// once the old permit has expired on the backend (nothing renews it).
	newer, err := lock.New(mem, nil).Semaphore("pool", 1).Acquire(ctx, 2*time.Minute)
	if err != nil {
		t.Fatalf("the takeover: %v", err)
	}
	defer newer.Release(context.Background())

	got, err := old.TTL(ctx)
	if !errors.Is(err, lock.ErrNotHeld) || got != 0 {
		t.Fatalf("old permit's TTL = %v, %v; want 0 and ErrNotHeld (the new holder's TTL is not ours)", got, err)
	}
	if err := old.Err(); !errors.Is(err, lock.ErrLost) {
		t.Errorf("old permit's Err = %v; want ErrLost", err)
	}
	if got, err := newer.TTL(ctx); err != nil || got <= time.Minute {
		t.Errorf("new holder's TTL = %v, %v; want its own, over a minute", got, err)
	}
}
