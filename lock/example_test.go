package lock_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
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
	var held *driver.HeldError
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
	info, _ := client.Inspect(ctx, "job")
	fmt.Println("still held:", info.Held())
	// Output:
	// recovered: bug
	// still held: false
}

// Observer.Retrying hears of every retry, with its cause, before Acquire
// waits; the fields left nil are skipped.
func ExampleObserver() {
	ctx := context.Background()
	backend := memory.NewBackend()
	_, _ = lock.New(backend, nil).TryAcquire(ctx, "job", time.Minute) // someone else holds it

	client := lock.New(backend, &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond, Observer: &lock.Observer{
		Retrying: func(e lock.Event) { fmt.Println("retrying", e.Attempt, e.Cause(), errors.Is(e.Err, lock.ErrHeld)) },
	}})
	_, err := client.Acquire(ctx, "job", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	// Output:
	// retrying 1 held true
	// true
}

// A periodic job that several instances schedule, run at most once per
// period: the lock keeps two runs from overlapping, and a fenced record of
// the last period done keeps an instance that gets the lock after another
// has finished from running the period again. Read it after Advance, so
// that a stalled earlier holder cannot write it afterwards.
func ExampleClient_Do_periodicJob() {
	ctx := context.Background()
	locks := lock.New(memory.NewBackend(), nil)
	store := memory.NewStore()

	runDue := func(instance, period string) error {
		return locks.Do(ctx, "nightly-report", time.Minute, func(ctx context.Context, lease *lock.Lease) error {
			w := lease.Fenced(store)
			if err := w.Advance(ctx, "nightly-report/last"); err != nil {
				return err
			}
			last, err := w.Get(ctx, "nightly-report/last")
			if err != nil && !errors.Is(err, fence.ErrNotFound) {
				return err
			}
			if string(last.Value) == period {
				fmt.Println(instance, "skips", period, "(done already)")
				return nil
			}
			fmt.Println(instance, "runs", period) // ... the job's fenced writes ...
			return w.Put(ctx, "nightly-report/last", []byte(period))
		})
	}
	_ = runDue("A", "2026-12-01")
	_ = runDue("B", "2026-12-01") // B's timer fired a little later
	_ = runDue("B", "2026-12-02")
	// Output:
	// A runs 2026-12-01
	// B skips 2026-12-01 (done already)
	// B runs 2026-12-02
}

// A leader-style singleton: every candidate loops on Do, and the one that
// holds the lock leads until its lease is lost (its context is cancelled
// with ErrLost) or the process stops. A new leader always has a higher
// token, so fenced writes of a deposed leader are refused.
func ExampleClient_Do_leader() {
	ctx, cancel := context.WithCancel(context.Background())
	backend := memory.NewBackend()
	locks := lock.New(backend, nil)

	leaders := make(chan fence.Token)
	var wg sync.WaitGroup
	campaign := func() {
		defer wg.Done()
		for ctx.Err() == nil { // stand again after losing the lease
			_ = locks.Do(ctx, "leader", 2*time.Second, func(ctx context.Context, lease *lock.Lease) error {
				select {
				case leaders <- lease.Token():
				case <-ctx.Done():
				}
				<-ctx.Done() // lead: do the work here, writing through lease.Fenced
				return context.Cause(ctx)
			})
		}
	}
	wg.Add(2)
	go campaign()
	first := <-leaders
	go campaign()
	backend.Expire("leader") // the leader's lease ends, as after a pause or a partition
	second := <-leaders
	fmt.Println("new leader, higher token:", second > first)
	cancel()
	wg.Wait()
	// Output: new leader, higher token: true
}

// Per-entity locks (one per invoice) let unrelated entities proceed in
// parallel. Sharded locks bound the number of locks: each entity maps to one
// of a fixed number of lock names, and its writes still go to its own key.
// Tokens are comparable only within one lock name, so an entity must always
// map to the same shard: changing the shard count while holders may be live
// breaks fencing for the entities that move.
func ExampleLease_Fenced_sharded() {
	ctx := context.Background()
	locks := lock.New(memory.NewBackend(), nil)
	store := memory.NewStore()

	const shards = 16 // fixed for the life of the data
	shardOf := func(entity string) string {
		h := fnv.New32a()
		h.Write([]byte(entity))
		return fmt.Sprintf("invoices/shard-%02d", h.Sum32()%shards)
	}
	for _, id := range []string{"invoice/1", "invoice/2"} {
		err := locks.Do(ctx, shardOf(id), time.Minute, func(ctx context.Context, lease *lock.Lease) error {
			return lease.Fenced(store).Put(ctx, id, []byte("sent")) // the entity's own key
		})
		fmt.Println(id, "under", shardOf(id)+":", err)
	}
	// Output:
	// invoice/1 under invoices/shard-04: <nil>
	// invoice/2 under invoices/shard-13: <nil>
}
