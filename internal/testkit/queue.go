package testkit

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// QueuedWaiters starts n Client.Acquire calls of name on b (place TTL
// placeTTL), each releasing at once when served, and returns once all are
// in line. served gets each lease's token in the order they were served.
func QueuedWaiters(t *testing.T, ctx context.Context, b driver.Backend, name string, n int, placeTTL time.Duration) (served chan fence.Token, done *sync.WaitGroup) {
	t.Helper()
	served = make(chan fence.Token, n)
	done = &sync.WaitGroup{}
	for range n {
		queued := make(chan struct{})
		var once atomic.Bool
		c := lock.New(b, &lock.Options{
			Queue: lock.QueueOptions{PlaceTTL: placeTTL},
			Observer: &lock.Observer{Retrying: func(lock.Event) {
				if once.CompareAndSwap(false, true) {
					close(queued)
				}
			}},
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

// PollsWithoutQueueTable checks a backend on a schema whose queue table is
// missing (a lease table not yet upgraded by Migrate): a blocking
// Client.Acquire of name behind a holder polls instead of failing, its
// refusals match ErrHeld and name both migrate (the adapter's Migrate) and
// queueTable, it gets the lock after the holder's release with a greater
// token, and Leave has nothing to do. The SQL adapters share it.
func PollsWithoutQueueTable(t *testing.T, ctx context.Context, b driver.Backend, name, migrate, queueTable string) {
	t.Helper()
	holder := Owner(t)
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: holder, TTL: time.Minute, Kind: driver.Exclusive})
	require.NoError(t, err)
	first := g.Token

	var (
		mu      sync.Mutex
		refusal error
	)
	refused := make(chan struct{})
	c := lock.New(b, &lock.Options{Observer: &lock.Observer{Retrying: func(e lock.Event) {
		mu.Lock()
		defer mu.Unlock()
		if refusal == nil {
			refusal = e.Err
			close(refused)
		}
	}}})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type result struct {
		l   *lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(wctx, name, time.Minute)
		got <- result{l, err}
	}()
	select {
	case <-refused:
	case r := <-got:
		t.Fatalf("Acquire returned before the release: %v", r.err)
	}
	mu.Lock()
	require.ErrorIs(t, refusal, lock.ErrHeld)
	require.True(t, strings.Contains(refusal.Error(), migrate) && strings.Contains(refusal.Error(), queueTable),
		"the refusal %q does not say the queue table is missing", refusal)
	mu.Unlock()

	require.NoError(t, b.Release(ctx, driver.Claim{Name: name, Owner: holder, Kind: driver.Exclusive}))
	r := <-got
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), first)
	require.NoError(t, r.l.Release(ctx))
	require.NoError(t, b.Leave(ctx, driver.Claim{Name: name, Owner: Owner(t), Kind: driver.Exclusive}), "Leave without the queue table")
}
