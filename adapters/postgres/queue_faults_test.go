package postgres_test

import (
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestQueueSurvivesServerRestart: a server restart with waiters in line
// ends every connection, the listening one included. The waiters fail
// transiently while it is down, keep (or retake) their places when it is
// back, listen again, and are all served once the holder releases, with
// tokens above the holder's.
func TestQueueSurvivesServerRestart(t *testing.T) {
	srv := testkit.NewPostgresServer(t)
	pool := migrated(t, srv.Pool(t))
	ctx := testCtx(t)
	b := newCalls(pool, nil)
	holder := newOwner(t)
	first, err := b.acquire(ctx, "l", holder, time.Minute)
	require.NoError(t, err)
	served, done := testkit.QueuedWaiters(t, ctx, b, "l", 3, 600*time.Millisecond)
	poll(t, "a listening connection", func() bool { return postgres.ListeningForTest(b.Backend) })

	srv.Stop()
	srv.Start()

	// Released through the pool (its connections were ended): retried
	// until the server answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := b.release(ctx, "l", holder)
		if err == nil {
			break
		}
		require.True(t, driver.Retryable(err) && time.Now().Before(deadline), "Release after the restart: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	testkit.CollectRising(t, served, 3, first, 20*time.Second)
	done.Wait()
	info, err := b.inspect(ctx, "l")
	require.NoError(t, err)
	require.Empty(t, info.Holders, "the lock is free when every waiter has released")
}
