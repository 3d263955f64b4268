package redis_test

import (
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

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
	first, err := acquire(ctx, b, "l", holder, time.Minute)
	require.NoError(t, err)
	served, done := testkit.QueuedWaiters(t, ctx, b, "l", 3, 300*time.Millisecond)

	srv.Stop()
	srv.Start()

	testkit.CollectRising(t, served, 3, first, 20*time.Second)
	done.Wait()
	info, err := inspect(ctx, b, "l")
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
	first, err := acquire(ctx, b, "l", holder, time.Minute)
	require.NoError(t, err)
	served, done := testkit.QueuedWaiters(t, ctx, b, "l", 3, 600*time.Millisecond)

	_, err = srv.Do("CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	_, err = srv.Do("CLIENT", "KILL", "TYPE", "normal")
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "l", holder))

	testkit.CollectRising(t, served, 3, first, 20*time.Second)
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
	tok, err := enqueue(ctx, b, "job", o, time.Minute, time.Minute)
	require.NoError(t, err)
	onReplica, err := replica.Client(t).HGet(ctx, b.LeaseKey("job"), "token").Result()
	require.NoError(t, err)
	require.Equal(t, tok.String(), onReplica)
	require.NoError(t, release(ctx, b, "job", o))

	replica.Stop()
	_, err = enqueue(ctx, short, "job", newOwner(t), time.Minute, time.Minute)
	require.ErrorIs(t, err, fenceredis.ErrReplication)
	info, err := inspect(ctx, b, "job")
	require.NoError(t, err)
	require.False(t, info.Held, "the unacknowledged lease was released: %+v", info)
}
