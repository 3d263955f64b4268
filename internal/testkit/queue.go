package testkit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// QueuedWaiters starts n Client.Acquire calls of name on b (place TTL
// placeTTL), each releasing at once when served, and returns once all are
// in line. served gets each lease's token in the order they were served.
func QueuedWaiters(t *testing.T, ctx context.Context, b lock.QueueBackend, name string, n int, placeTTL time.Duration) (served chan fence.Token, done *sync.WaitGroup) {
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

// CollectRising reads n tokens from served, failing after d, and checks that they
// rise and are above floor.
func CollectRising(t *testing.T, served chan fence.Token, n int, floor fence.Token, d time.Duration) {
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
