package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// TryDo runs the function only if the lock is free now: one Client serves
// both blocking and try-once work.
func ExampleClient_TryDo() {
	ctx := context.Background()
	client := lock.New(memory.NewBackend(), nil)

	_ = client.Do(ctx, "nightly-report", time.Minute, func(ctx context.Context, _ *lock.Lease) error {
		// Another worker tries while this one holds the lock.
		err := client.TryDo(ctx, "nightly-report", time.Minute, func(context.Context, *lock.Lease) error {
			fmt.Println("never printed")
			return nil
		})
		fmt.Println("busy:", errors.Is(err, lock.ErrHeld))
		return nil
	})
	err := client.TryDo(ctx, "nightly-report", time.Minute, func(context.Context, *lock.Lease) error {
		fmt.Println("ran")
		return nil
	})
	fmt.Println("free:", err)
	// Output:
	// busy: true
	// ran
	// free: <nil>
}

// Per-call options override the Client's Options for one call only.
func ExampleWithMaxAttempts() {
	ctx := context.Background()
	backend := memory.NewBackend()
	_, _ = lock.New(backend, nil).TryAcquire(ctx, "job", time.Minute) // someone else holds it
	attempts := 0
	client := lock.New(backend, &lock.Options{MinBackoff: time.Millisecond, Observer: &lock.Observer{
		Retrying: func(e lock.Event) { attempts = e.Attempt },
	}})

	// The Client retries until ctx ends; this call gives up after 3.
	_, err := client.Acquire(ctx, "job", time.Minute, lock.WithMaxAttempts(3))
	fmt.Println(errors.Is(err, lock.ErrNotAcquired), attempts+1)
	// Output: true 3
}

// WithLease gives a context that ends with the caller's or with the lease,
// whichever ends first; context.Cause tells which.
func ExampleWithLease() {
	client := lock.New(memory.NewBackend(), nil)
	lease, _ := client.TryAcquire(context.Background(), "job", time.Minute)

	parent, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	ctx, cancel := lock.WithLease(parent, lease)
	defer cancel()

	_ = lease.Release(context.Background())
	<-ctx.Done()
	fmt.Println(errors.Is(context.Cause(ctx), lock.ErrReleased))
	// Output: true
}
