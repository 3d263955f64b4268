package redis_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// queuedWaiters starts n Client.Acquire calls of name on b (place TTL
// placeTTL), each releasing at once when served, and returns once all are
// in line. served gets each lease's token in the order they were served.
func queuedWaiters(t *testing.T, ctx context.Context, b *fenceredis.Backend, name string, n int, placeTTL time.Duration) (served chan fence.Token, done *sync.WaitGroup) {
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

// TestQueueSurvivesServerRestart: a restart without persistence loses the
// lease, the queue and the counter; the waiters, failing transiently while
// the server is down, queue again at their next attempt and are all served,
// with tokens above every earlier one (minted from the server clock).
func TestQueueSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	holder := newOwner(t)
	first, err := b.Acquire(ctx, "l", holder, time.Minute)
	require.NoError(t, err)
	served, done := queuedWaiters(t, ctx, b, "l", 3, 300*time.Millisecond)

	srv.Stop()
	srv.Start()

	collect(t, served, 3, first, 20*time.Second)
	done.Wait()
	info, err := b.Inspect(ctx, "l")
	require.NoError(t, err)
	require.False(t, info.Held, "the lock is free when every waiter has released")
}

// TestQueueSurvivesCutConnections: killing every client connection of the
// server, the pub/sub one included, while waiters are queued delays them at
// most to their renewal: go-redis reconnects (and resubscribes), and every
// waiter is served in turn.
func TestQueueSurvivesCutConnections(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	holder := newOwner(t)
	first, err := b.Acquire(ctx, "l", holder, time.Minute)
	require.NoError(t, err)
	served, done := queuedWaiters(t, ctx, b, "l", 3, 600*time.Millisecond)

	_, err = srv.Do("CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	_, err = srv.Do("CLIENT", "KILL", "TYPE", "normal")
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "l", holder))

	collect(t, served, 3, first, 20*time.Second)
	done.Wait()
}

// TestQueueWaitReplicas: with WaitReplicas set, a queued acquire waits for
// the replica as a plain one does: the lease is on the replica when it
// returns, and with the replica down it fails with ErrReplication and
// leaves no lease behind.
func TestQueueWaitReplicas(t *testing.T) {
	t.Parallel()
	primary, replica := testkit.NewRedisReplicated(t)
	c := primary.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	short := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})

	o := newOwner(t)
	tok, err := b.AcquireOrEnqueue(ctx, "job", o, time.Minute, time.Minute)
	require.NoError(t, err)
	onReplica, err := replica.Client(t).HGet(ctx, b.LeaseKey("job"), "token").Result()
	require.NoError(t, err)
	require.Equal(t, tok.String(), onReplica)
	require.NoError(t, b.Release(ctx, "job", o))

	replica.Stop()
	_, err = short.AcquireOrEnqueue(ctx, "job", newOwner(t), time.Minute, time.Minute)
	require.ErrorIs(t, err, fenceredis.ErrReplication)
	info, err := b.Inspect(ctx, "job")
	require.NoError(t, err)
	require.False(t, info.Held, "the unacknowledged lease was released: %+v", info)
}
