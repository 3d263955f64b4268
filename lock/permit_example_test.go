package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// Two of three exports run at once: a semaphore of 2 permits lets the first
// two in, and the third, asking once, is refused.
func ExampleSemaphore() {
	ctx := context.Background()
	client := lock.New(memory.NewBackend(), nil)
	exports := client.Semaphore("exports", 2)

	a, _ := exports.TryAcquire(ctx, 10*time.Second)
	b, _ := exports.TryAcquire(ctx, 10*time.Second)
	_, err := exports.TryAcquire(ctx, 10*time.Second)
	fmt.Println("tokens:", a.Token(), b.Token())
	fmt.Println("third refused:", errors.Is(err, lock.ErrHeld))

	_, err = client.Semaphore("exports", 3).TryAcquire(ctx, 10*time.Second)
	fmt.Println("another limit refused:", errors.Is(err, lock.ErrShapeMismatch))
	_ = a.Release(ctx)
	_ = b.Release(ctx)
	// Output:
	// tokens: 1 2
	// third refused: true
	// another limit refused: true
}

// A reader learns which writer came before it: when the store's fence is
// above the reader's PriorWriter, a newer writer has written since.
func ExampleRWLock() {
	ctx := context.Background()
	backend, store := memory.NewBackend(), memory.NewStore()
	prices := lock.New(backend, nil).RWLock("prices")

	_ = prices.DoWrite(ctx, 10*time.Second, func(ctx context.Context, w *lock.Lease) error {
		return w.Fenced(store).Put(ctx, "prices", []byte("v1"))
	})
	r, _ := prices.AcquireRead(ctx, 10*time.Second)
	_ = prices.DoWrite(ctx, 10*time.Second, func(ctx context.Context, w *lock.Lease) error {
		return errors.New("not reached while a reader holds the lock")
	}, lock.WithMaxAttempts(1))
	rec, _ := store.Get(ctx, "prices")
	fenceNow := rec.Fence
	fmt.Println("reader's prior writer:", r.PriorWriter(), "store fence:", fenceNow, "newer writer since:", fenceNow > r.PriorWriter())
	_ = r.Release(ctx)

	_ = prices.DoWrite(ctx, 10*time.Second, func(ctx context.Context, w *lock.Lease) error {
		return w.Fenced(store).Put(ctx, "prices", []byte("v2"))
	})
	rec, _ = store.Get(ctx, "prices")
	fenceNow = rec.Fence
	fmt.Println("after another writer, fence:", fenceNow, "newer writer since:", fenceNow > r.PriorWriter())
	// Output:
	// reader's prior writer: 1 store fence: 1 newer writer since: false
	// after another writer, fence: 3 newer writer since: true
}

// A semaphore or read-write lock over a backend
// without lock.PermitBackend is refused with ErrUnsupported, and a bad limit
// with ErrInvalid, before anything is sent.
func ExampleClient_Semaphore_unsupported() {
	ctx := context.Background()
	client := lock.New(lockOnly{memory.NewBackend()}, nil)
	_, err := client.Semaphore("jobs", 2).TryAcquire(ctx, time.Second)
	fmt.Println(errors.Is(err, lock.ErrUnsupported))
	_, err = client.RWLock("jobs").AcquireRead(ctx, time.Second)
	fmt.Println(errors.Is(err, lock.ErrUnsupported))
	_, err = lock.New(memory.NewBackend(), nil).Semaphore("jobs", 0).TryAcquire(ctx, time.Second)
	fmt.Println(errors.Is(err, lock.ErrInvalid))
	// Output:
	// true
	// true
	// true
}

// lockOnly hides every optional capability of a Backend.
type lockOnly struct{ lock.Backend }
