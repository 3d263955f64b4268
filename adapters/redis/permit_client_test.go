package redis_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestSemaphoreAcrossProcesses: lock.Client's Semaphore over Redis, with
// workers in several processes (each its own Backend and client): never
// more than N hold at once, every worker gets its permit in time (woken by
// releases, their renewals a minute apart), and the tokens are all
// different.
func TestSemaphoreAcrossProcesses(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	ctx := testCtx(t)
	prefix := testkit.RedisPrefix(t, shared)
	const n, workers = 2, 6
	var inside, most atomic.Int64
	var mu sync.Mutex
	tokens := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		c := goredis.NewClient(shared.Options())
		t.Cleanup(func() { _ = c.Close() })
		client := lock.New(fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix}),
			&lock.Options{Queue: lock.QueueOptions{PlaceTTL: 3 * time.Minute}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			errs <- client.Semaphore("pool", n).Do(wctx, time.Minute, func(ctx context.Context, p *lock.Lease) error {
				now := inside.Add(1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				mu.Lock()
				tokens[int64(p.Token())] = true
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the work: holds the permit a moment
				inside.Add(-1)
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, most.Load(), int64(n), "permits held at once")
	require.Len(t, tokens, workers, "one token per permit")
}

// TestRWLockWithoutPubSub: over a Client that cannot subscribe, a writer
// queued behind a reader still gets the lock, at its renewal.
func TestRWLockWithoutPubSub(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(processOnly{c}, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	client := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 150 * time.Millisecond}})
	rw := client.RWLock("rw")
	r, err := rw.AcquireRead(ctx, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		w, err := rw.AcquireWrite(ctx, time.Minute)
		if err == nil {
			err = w.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the writer queueing", func() bool {
		info, err := rw.Inspect(ctx)
		return err == nil && info.Waiting == 1
	})
	_, err = rw.TryAcquireRead(ctx, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld, "a reader behind the waiting writer")
	require.NoError(t, r.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the writer was not served at its renewal")
	}
}
