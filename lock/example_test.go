package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Do holds the lock for the duration of a function, renewing it in the
// background; every write inside carries the lease's token.
func ExampleClient_Do() {
	ctx := context.Background()
	client := lock.New(memory.NewBackend(), nil)
	store := memory.NewStore()

	err := client.Do(ctx, "invoice/42", 10*time.Second, func(ctx context.Context, lease *lock.Lease) error {
		// ctx is cancelled if the lease is lost.
		return lease.Fenced(store).Put(ctx, "invoice/42/status", []byte("sent"))
	})
	fmt.Println("do:", err)

	rec, _ := store.Get(ctx, "invoice/42/status")
	fmt.Printf("%s (fence %d)\n", rec.Value, rec.Fence)
	// Output:
	// do: <nil>
	// sent (fence 1)
}

// A holder that paused past its lease writes too late: the store refuses it,
// because the next holder's token is higher.
func ExampleLease_Fenced() {
	ctx := context.Background()
	backend := memory.NewBackend()
	client := lock.New(backend, nil)
	store := memory.NewStore()

	a, _ := client.TryAcquire(ctx, "report", 50*time.Millisecond)
	<-a.Done() // A stalls; its lease runs out
	fmt.Println("A's lease:", errors.Is(a.Err(), lock.ErrLost))
	backend.Expire("report") // the backend's TTL ends too

	b, _ := client.TryAcquire(ctx, "report", time.Minute)
	defer b.Release(ctx)
	fmt.Println("B writes:", b.Fenced(store).Put(ctx, "report", []byte("B")))

	err := a.Fenced(store).Put(ctx, "report", []byte("A"))
	fmt.Println("A writes late:", errors.Is(err, fence.ErrStale))
	// Output:
	// A's lease: true
	// B writes: <nil>
	// A writes late: true
}

// TryAcquire makes one attempt; a held lock reports the holder's remaining
// TTL, which a caller can use to schedule the next try.
func ExampleClient_TryAcquire() {
	ctx := context.Background()
	client := lock.New(memory.NewBackend(), nil)

	first, _ := client.TryAcquire(ctx, "rebuild", time.Minute)
	defer first.Release(ctx)

	_, err := client.TryAcquire(ctx, "rebuild", time.Minute)
	var held *lock.HeldError
	fmt.Println(errors.Is(err, lock.ErrNotAcquired), errors.As(err, &held) && held.TTL > 0)
	// Output: true true
}

// A panic in Do's function still releases the lock before it propagates, so
// a caller that recovers it (as net/http does) does not leave the lock held.
func ExampleClient_Do_panic() {
	ctx := context.Background()
	backend := memory.NewBackend()
	client := lock.New(backend, nil)

	func() {
		defer func() { fmt.Println("recovered:", recover()) }()
		_ = client.Do(ctx, "job", time.Minute, func(context.Context, *lock.Lease) error {
			panic("bug")
		})
	}()
	info, _ := backend.Inspect(ctx, "job")
	fmt.Println("still held:", info.Held)
	// Output:
	// recovered: bug
	// still held: false
}

// The Observer hears of every retry, with its cause, before Acquire waits.
func ExampleOptions_observer() {
	ctx := context.Background()
	backend := memory.NewBackend()
	_, _ = backend.Acquire(ctx, "job", "someone-else", time.Minute)

	client := lock.New(backend, &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond, Observer: func(e lock.Event) {
		fmt.Println(e.Kind, e.Attempt, errors.Is(e.Err, lock.ErrHeld))
	}})
	_, err := client.Acquire(ctx, "job", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	// Output:
	// retrying 1 true
	// true
}
