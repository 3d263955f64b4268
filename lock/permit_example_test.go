package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
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

// A reader raises the key's fence to its ReadFence, one above the writer
// that came before it, so that writer can no longer change the key; when
// the fence is later above the reader's ReadFence, a newer writer has
// written since.
func ExampleRWLock() {
	ctx := context.Background()
	backend, store := memory.NewBackend(), memory.NewStore()
	prices := lock.New(backend, nil).RWLock("prices")

	var first *lock.Lease
	_ = prices.DoWrite(ctx, 10*time.Second, func(ctx context.Context, w *lock.Lease) error {
		first = w
		return w.Fenced(store).Put(ctx, "prices", []byte("v1"))
	})
	r, _ := prices.AcquireRead(ctx, 10*time.Second)
	_ = r.Fenced(store).Advance(ctx, "prices")
	_ = prices.DoWrite(ctx, 10*time.Second, func(ctx context.Context, w *lock.Lease) error {
		return errors.New("not reached while a reader holds the lock")
	}, lock.WithMaxAttempts(1))
	// The first writer, had it paused past its TTL, could not write now.
	err := first.Fenced(store).Put(ctx, "prices", []byte("late"))
	fmt.Println("prior writer:", r.PriorWriter(), "read fence:", r.ReadFence(), "late write refused:", errors.Is(err, fence.ErrStale))
	rec, _ := store.Get(ctx, "prices")
	fmt.Println("fence:", rec.Fence, "value:", string(rec.Value), "newer writer since:", rec.Fence > r.ReadFence())
	_ = r.Release(ctx)

	_ = prices.DoWrite(ctx, 10*time.Second, func(ctx context.Context, w *lock.Lease) error {
		return w.Fenced(store).Put(ctx, "prices", []byte("v2"))
	})
	rec, _ = store.Get(ctx, "prices")
	fmt.Println("after another writer, fence:", rec.Fence, "newer writer since:", rec.Fence > r.ReadFence())
	// Output:
	// prior writer: 1 read fence: 2 late write refused: true
	// fence: 2 value: v1 newer writer since: false
	// after another writer, fence: 3 newer writer since: true
}

// A semaphore or read-write lock over a backend that cannot offer permits
// (its Acquire answers driver.ErrUnsupported for them) gets that error at
// once, and a bad limit gets ErrInvalid before anything is sent.
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

// lockOnly is a driver that has locks but no permits, as a third-party
// backend may: it refuses every permit kind with driver.ErrUnsupported.
type lockOnly struct{ driver.Backend }

func (l lockOnly) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind.Permit() {
		return driver.Grant{}, driver.ErrUnsupported
	}
	return l.Backend.Acquire(ctx, req)
}
