package redis_test

import (
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestScriptFlushIsTransparent empties the server's script cache between
// every two operations: each still works, costing one extra round trip
// (EVALSHA answered NOSCRIPT, then EVAL).
func TestScriptFlushIsTransparent(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c, rt := counted(t, srv.Addr())
	admin := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	s := fenceredis.NewStore(c, nil)
	o := newOwner(t)

	tok, err := acquire(ctx, b, "job", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "k", tok, []byte("v1")))
	_, _ = rt.take()

	flush := func() {
		require.NoError(t, admin.ScriptFlush(ctx).Err())
		_, _ = rt.take()
	}
	check := func(what string) {
		n, sent := rt.take()
		t.Logf("%-28s %d round trips: %v", what+" after SCRIPT FLUSH", n, sent)
		require.Equal(t, 2, n, what)
	}

	flush()
	require.NoError(t, extend(ctx, b, "job", o, time.Minute))
	check("Extend")
	flush()
	info, err := inspect(ctx, b, "job")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, o, info.Owner)
	require.Equal(t, tok, info.Token)
	check("Inspect")
	flush()
	again, err := acquire(ctx, b, "job", o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, tok, again)
	check("Acquire (same owner)")
	flush()
	require.NoError(t, s.Put(ctx, "k", tok, []byte("v2")))
	check("Put")
	flush()
	require.ErrorIs(t, s.Put(ctx, "k", tok-1, []byte("late")), fence.ErrStale)
	check("Put (stale)")
	flush()
	require.NoError(t, s.Advance(ctx, "k", tok))
	check("Advance")
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v2", string(rec.Value))
	require.Equal(t, tok, rec.Fence)
	_, _ = rt.take()
	flush()
	require.NoError(t, release(ctx, b, "job", o))
	check("Release")
	flush()
	next, err := acquire(ctx, b, "job", newOwner(t), time.Minute)
	require.NoError(t, err)
	require.Greater(t, next, tok)
	check("Acquire (free)")
	flush()
	require.NoError(t, s.Delete(ctx, "k", next))
	check("Delete")
}

// TestRestartWithoutPersistence loses all lock data: the server is shut
// down without saving and started again, empty. The next token must still be
// above every earlier one, so that a fenced store on another server keeps
// refusing the holder from before the restart.
func TestRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	lockSrv := testkit.NewRedisServer(t)
	storeSrv := testkit.NewRedisServer(t)
	ctx := testCtx(t)
	locks := lockSrv.Client(t)
	b := fenceredis.NewBackend(locks, nil)
	s := fenceredis.NewStore(storeSrv.Client(t), nil)

	// Several holders in a row, each writing with its token; the last one
	// still holds the lock when the server goes down.
	var before []fence.Token
	var holder string
	for i := 0; i < 5; i++ {
		holder = newOwner(t)
		tok, err := acquire(ctx, b, "job", holder, time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "report", tok, []byte("by holder "+tok.String())))
		before = append(before, tok)
		if i < 4 {
			require.NoError(t, release(ctx, b, "job", holder))
		}
	}
	old := before[len(before)-1]
	t.Logf("tokens before the restart: %v (the last holder, %d, still holds the lock)", before, old)

	lockSrv.Stop()
	lockSrv.Start()
	n, err := locks.Exists(ctx, b.LeaseKey("job"), b.CounterKey("job")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the restart lost the lease and the counter")

	// The lease was lost with the data: a new owner gets the lock at once.
	newer := newOwner(t)
	tok, err := acquire(ctx, b, "job", newer, time.Minute)
	require.NoError(t, err)
	t.Logf("token after the restart: %d (%+d over the last one before)", tok, tok-old)
	for _, earlier := range before {
		require.Greater(t, tok, earlier)
	}
	require.NoError(t, s.Put(ctx, "report", tok, []byte("by the new holder")))

	// The holder from before the restart wakes up and writes: refused.
	err = s.Put(ctx, "report", old, []byte("late write"))
	var stale *fence.StaleError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, tok, stale.Fence)
	t.Logf("pre-restart holder's write refused: %v", err)
	rec, err := s.Get(ctx, "report")
	require.NoError(t, err)
	require.Equal(t, "by the new holder", string(rec.Value))

	// And its lock calls fail without touching the new holder.
	require.Error(t, release(ctx, b, "job", holder))
	info, err := inspect(ctx, b, "job")
	require.NoError(t, err)
	require.Equal(t, newer, info.Owner)
	require.Equal(t, tok, info.Token)
}
