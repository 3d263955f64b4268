package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// markSent is application code under test. It takes the lock client and the
// store as parameters, so that production passes Redis or PostgreSQL ones
// and tests pass in-memory ones.
func markSent(ctx context.Context, locks *lock.Client, store fence.Store, invoice string) error {
	return locks.Do(ctx, invoice, 10*time.Second, func(ctx context.Context, lease *lock.Lease) error {
		w := lease.Fenced(store)
		if err := w.Advance(ctx, invoice); err != nil { // raise the fence, then read
			return err
		}
		rec, err := w.Get(ctx, invoice)
		if err == nil && string(rec.Value) == "sent" {
			return nil // already done
		}
		if err != nil && !errors.Is(err, fence.ErrNotFound) {
			return err
		}
		return w.Put(ctx, invoice, []byte("sent"))
	})
}

// Testing application code with the in-memory adapter: same semantics as the
// networked ones, no server, and Expire to end a lease at once, as a pause
// past the TTL would, without waiting for it.
func Example() {
	ctx := context.Background()
	backend := memory.NewBackend()
	store := memory.NewStore()
	locks := lock.New(backend, nil)

	fmt.Println("first call:", markSent(ctx, locks, store, "invoice/42"))
	fmt.Println("second call:", markSent(ctx, locks, store, "invoice/42"))

	// A holder whose lease ran out while it was stalled: its write is refused.
	stalled, _ := locks.TryAcquire(ctx, "invoice/7", time.Minute)
	backend.Expire("invoice/7")
	fmt.Println("next holder:", markSent(ctx, locks, store, "invoice/7"))
	err := stalled.Fenced(store).Put(ctx, "invoice/7", []byte("pending"))
	fmt.Println("stalled holder's write is stale:", errors.Is(err, fence.ErrStale))
	rec, _ := store.Get(ctx, "invoice/7")
	fmt.Printf("invoice/7: %s\n", rec.Value)
	// Output:
	// first call: <nil>
	// second call: <nil>
	// next holder: <nil>
	// stalled holder's write is stale: true
	// invoice/7: sent
}

// Expire ends a lease on the backend at once. A lease kept alive learns it
// at its next renewal (the backend says ErrNotHeld) and is lost: this is
// what a pause past the TTL looks like to a holder that wakes up.
func ExampleBackend_Expire() {
	ctx := context.Background()
	backend := memory.NewBackend()
	locks := lock.New(backend, &lock.Options{KeepAlive: true})

	lease, _ := locks.TryAcquire(ctx, "job", 300*time.Millisecond)
	backend.Expire("job")
	<-lease.Done() // the keep-alive's next renewal finds the lease gone
	fmt.Println("lost:", errors.Is(lease.Err(), lock.ErrLost))
	// Output: lost: true
}
