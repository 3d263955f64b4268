package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// queuedWaiters starts n Client.Acquire calls of name on b (place TTL
// placeTTL), each releasing at once when served, and returns once all are
// in line. served gets each lease's token in the order they were served.
func queuedWaiters(t *testing.T, ctx context.Context, b *postgres.Backend, name string, n int, placeTTL time.Duration) (served chan fence.Token, done *sync.WaitGroup) {
	t.Helper()
	served = make(chan fence.Token, n)
	done = &sync.WaitGroup{}
	for range n {
		queued := make(chan struct{})
		var once atomic.Bool
		c := lock.New(b, &lock.Options{
			Queue: lock.QueueOptions{PlaceTTL: placeTTL},
			Observer: func(e lock.Event) {
				if e.Kind == lock.EventRetrying && once.CompareAndSwap(false, true) {
					close(queued)
				}
			},
		})
		done.Add(1)
		go func() {
			defer done.Done()
			l, err := c.Acquire(ctx, name, time.Minute)
			if err != nil {
				t.Errorf("waiter: %v", err)
				return
			}
			served <- l.Token()
			_ = l.Release(context.WithoutCancel(ctx))
		}()
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was never refused (queued)")
		}
	}
	return served, done
}

// collect reads n tokens from served, failing after d, and checks that they
// rise and are above floor.
func collect(t *testing.T, served chan fence.Token, n int, floor fence.Token, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	prev := floor
	for i := range n {
		select {
		case tok := <-served:
			require.Greater(t, tok, prev, "waiter %d's token", i+1)
			prev = tok
		case <-deadline:
			t.Fatalf("only %d of %d waiters served within %v", i, n, d)
		}
	}
}

// TestQueueSurvivesServerRestart: a server restart with waiters in line
// ends every connection, the listening one included. The waiters fail
// transiently while it is down, keep (or retake) their places when it is
// back, listen again, and are all served once the holder releases, with
// tokens above the holder's.
func TestQueueSurvivesServerRestart(t *testing.T) {
	srv := testkit.NewPostgresServer(t)
	pool := migrated(t, srv.Pool(t))
	ctx := testCtx(t)
	b := postgres.NewBackend(pool, nil)
	holder := newOwner(t)
	first, err := b.Acquire(ctx, "l", holder, time.Minute)
	require.NoError(t, err)
	served, done := queuedWaiters(t, ctx, b, "l", 3, 600*time.Millisecond)
	poll(t, "a listening connection", func() bool { return postgres.ListeningForTest(b) })

	srv.Stop()
	srv.Start()

	// Released through the pool (its connections were ended): retried
	// until the server answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := b.Release(ctx, "l", holder)
		if err == nil {
			break
		}
		require.True(t, lock.Retryable(err) && time.Now().Before(deadline), "Release after the restart: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	collect(t, served, 3, first, 20*time.Second)
	done.Wait()
	info, err := b.Inspect(ctx, "l")
	require.NoError(t, err)
	require.False(t, info.Held, "the lock is free when every waiter has released")
}
