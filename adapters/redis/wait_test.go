package redis_test

import (
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestWaitReplicas acquires with a replication wait on a primary with one
// replica: it succeeds while the replica is up, and with the replica down it
// fails and leaves no lock behind.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	primary, replica := testkit.NewRedisReplicated(t)
	c, rt := counted(t, primary.Addr())
	ctx := testCtx(t)
	// A generous timeout where the replica must answer, a short one where
	// it cannot.
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	short := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})

	// Cache the script (EVALSHA, NOSCRIPT, then EVAL, each with WAIT).
	warm := newOwner(t)
	_, err := acquire(ctx, b, "warm", warm, time.Minute)
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "warm", warm))
	_, _ = rt.take()

	o := newOwner(t)
	tok, err := acquireMD(ctx, b, "job", o, time.Minute, "host=a pid=1")
	require.NoError(t, err)
	n, sent := rt.take()
	t.Logf("Acquire with WAIT: %d round trip(s): %v", n, sent)
	require.Equal(t, 1, n, "script and WAIT share one pipeline")
	// WAIT returned only after the replica had the lease.
	onReplica, err := replica.Client(t).HGet(ctx, b.LeaseKey("job"), "token").Result()
	require.NoError(t, err)
	require.Equal(t, tok.String(), onReplica)
	mdOnReplica, err := replica.Client(t).HGet(ctx, b.LeaseKey("job"), "metadata").Result()
	require.NoError(t, err)
	require.Equal(t, "host=a pid=1", mdOnReplica, "the metadata travels with the waited-for lease")
	require.NoError(t, release(ctx, b, "job", o))

	replica.Stop()
	start := time.Now()
	_, err = acquire(ctx, short, "job", newOwner(t), time.Minute)
	took := time.Since(start)
	require.ErrorIs(t, err, fenceredis.ErrReplication)
	var re *fenceredis.ReplicationError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 0, re.Got)
	require.Equal(t, 1, re.Want)
	require.NoError(t, re.ReleaseErr)
	require.GreaterOrEqual(t, took, 300*time.Millisecond, "WAIT waited for its timeout")
	t.Logf("with the replica down: %v after %v", err, took)
	info, err := inspect(ctx, b, "job")
	require.NoError(t, err)
	require.False(t, info.Held, "the unacknowledged lease was released: %+v", info)

	// The replica comes back (empty, it resyncs): waiting works again and
	// the token is still above the earlier ones.
	replica.Start()
	replica.WaitReplicating()
	primary.WaitReplicas(1)
	next, err := acquire(ctx, b, "job", newOwner(t), time.Minute)
	require.NoError(t, err)
	require.Greater(t, next, tok)
}

// TestWaitNeedsOneConnection: a Ring cannot run WAIT on the connection that
// ran the script, so Acquire refuses before sending anything.
func TestWaitNeedsOneConnection(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	rt := &roundTrips{}
	ring.AddHook(rt)
	ctx := testCtx(t)

	b := fenceredis.NewBackend(ring, &fenceredis.BackendOptions{WaitReplicas: 1})
	_, err := acquire(ctx, b, "job", newOwner(t), time.Minute)
	require.ErrorIs(t, err, fenceredis.ErrWaitUnsupported)
	n, sent := rt.take()
	require.Zero(t, n, "sent %v", sent)

	// Without the wait, a Ring works.
	plain := fenceredis.NewBackend(ring, nil)
	tok, err := acquire(ctx, plain, "job", newOwner(t), time.Minute)
	require.NoError(t, err)
	require.True(t, tok.Valid())
}

// TestWaitTimeoutBelowReadTimeout: a WAIT longer than the client's read
// timeout would break the connection mid-reply; it is refused up front.
func TestWaitTimeoutBelowReadTimeout(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	rt := &roundTrips{}
	c.AddHook(rt)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: time.Second})
	_, err := acquire(testCtx(t), b, "job", newOwner(t), time.Minute)
	require.Error(t, err)
	require.Contains(t, err.Error(), "ReadTimeout")
	require.False(t, errors.Is(err, fence.ErrInvalid))
	n, _ := rt.take()
	require.Zero(t, n)
}

// TestStoreWaitReplicas writes with a replication wait on a primary with one
// replica: a write succeeds once the replica has it; with the replica down
// the write is applied on the primary but reported as an unknown outcome
// (ErrReplication), never as success and never as fence.ErrStale.
func TestStoreWaitReplicas(t *testing.T) {
	t.Parallel()
	primary, replica := testkit.NewRedisReplicated(t)
	c := primary.Client(t)
	ctx := testCtx(t)
	s := fenceredis.NewStore(c, &fenceredis.StoreOptions{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	short := fenceredis.NewStore(c, &fenceredis.StoreOptions{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})

	require.NoError(t, s.Put(ctx, "k", 5, []byte("v5")))
	onReplica, err := replica.Client(t).HGet(ctx, s.Key("k"), "value").Result()
	require.NoError(t, err)
	require.Equal(t, "v5", onReplica, "the write was on the replica when Put returned")
	require.ErrorIs(t, s.Put(ctx, "k", 4, []byte("late")), fence.ErrStale)

	replica.Stop()
	// In token order: each write must be refused for replication, not as
	// stale after a higher token (a map's random order made this flaky).
	for _, w := range []struct {
		op    string
		write func() error
	}{
		{"Put", func() error { return short.Put(ctx, "k", 6, []byte("v6")) }},
		{"Advance", func() error { return short.Advance(ctx, "k", 7) }},
		{"Delete", func() error { return short.Delete(ctx, "k", 8) }},
	} {
		op, err := w.op, w.write()
		require.ErrorIs(t, err, fenceredis.ErrReplication, op)
		require.NotErrorIs(t, err, fence.ErrStale, op)
		require.ErrorContains(t, err, "outcome unknown", op)
		var re *fenceredis.ReplicationError
		require.ErrorAs(t, err, &re)
		require.Equal(t, 0, re.Got, op)
		t.Logf("%s with the replica down: %v", op, err)
	}
	rec, err := fenceredis.NewStore(c, nil).Get(ctx, "k")
	require.ErrorIs(t, err, fence.ErrNotFound, "the delete was applied on the primary")
	require.Equal(t, fence.Token(8), rec.Fence)
}

// TestPermitWaitReplicas: with WaitReplicas, a granted permit travels in
// one pipeline with WAIT and is on the replica when Acquire returns;
// with the replica down it fails with ErrReplication and the permit is
// released again, so it holds no slot of the semaphore.
func TestPermitWaitReplicas(t *testing.T) {
	t.Parallel()
	primary, replica := testkit.NewRedisReplicated(t)
	c, rt := counted(t, primary.Addr())
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	short := fenceredis.NewBackend(c, &fenceredis.BackendOptions{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
	req := driver.Request{Kind: driver.Semaphore, Limit: 1, TTL: time.Minute}

	warm := newOwner(t)
	_, err := acquirePermit(ctx, b, "warm", warm, req)
	require.NoError(t, err)
	require.NoError(t, releasePermit(ctx, b, "warm", warm))
	_, _ = rt.take()

	o := newOwner(t)
	p, err := acquirePermit(ctx, b, "sem", o, req)
	require.NoError(t, err)
	n, sent := rt.take()
	require.Equal(t, 1, n, "script and WAIT share one pipeline: %v", sent)
	onReplica, err := replica.Client(t).HGet(ctx, b.PermitKeys("sem")[0], "last").Result()
	require.NoError(t, err)
	require.Equal(t, p.Token.String(), onReplica, "the counter on the replica")
	require.NoError(t, releasePermit(ctx, b, "sem", o))

	replica.Stop()
	_, err = acquirePermit(ctx, short, "sem", newOwner(t), req)
	require.ErrorIs(t, err, fenceredis.ErrReplication)
	var re *fenceredis.ReplicationError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 0, re.Got)
	require.NoError(t, re.ReleaseErr)
	info, err := inspectPermits(ctx, b, "sem")
	require.NoError(t, err)
	require.Empty(t, info.Holders, "the unacknowledged permit was released")
}
