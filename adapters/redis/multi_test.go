package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// inOrder is a driver that cannot take a set in one step (as on a Ring):
// it answers driver.ErrNotAtomic, and the Client takes the names in order.
type inOrder struct{ driver.Backend }

func (o inOrder) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, driver.ErrNotAtomic
	}
	return o.Backend.Acquire(ctx, req)
}

// TestAcquireMultiOneRoundTrip counts what a set of five names costs: one
// round trip through the set's Acquire (taken, or refused because one is
// held), five when the driver answers ErrNotAtomic and the Client takes them
// in order.
func TestAcquireMultiOneRoundTrip(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c, rt := counted(t, srv.Addr())
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	names := []string{"e", "d", "c", "b", "a"}
	o := newOwner(t)

	// Warm up: connect, and cache the script (EVALSHA, NOSCRIPT, EVAL).
	_, err := acquireSet(ctx, b, []string{"warm"}, o, time.Minute)
	require.NoError(t, err)
	rt.take()

	client := lock.New(b, nil)
	set, err := client.TryAcquireMulti(ctx, names, time.Minute)
	require.NoError(t, err)
	n, sent := rt.take()
	require.Equal(t, 1, n, "round trips of TryAcquireMulti over one Acquire: %v", sent)
	require.NoError(t, set.Release(ctx))
	rt.take()

	other := newOwner(t)
	_, err = acquire(ctx, b, "c", other, time.Minute)
	require.NoError(t, err)
	rt.take()
	_, err = client.TryAcquireMulti(ctx, names, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	n, sent = rt.take()
	require.Equal(t, 1, n, "round trips of a refused TryAcquireMulti over one Acquire: %v", sent)
	require.NoError(t, release(ctx, b, "c", other))
	rt.take()

	ordered := lock.New(inOrder{b}, nil)
	set, err = ordered.TryAcquireMulti(ctx, names, time.Minute)
	require.NoError(t, err)
	n, sent = rt.take()
	require.Equal(t, len(names), n, "round trips of TryAcquireMulti in order: %v", sent)
	require.NoError(t, set.Release(ctx))
}

// TestHashSlot checks the slot computation against the example of the Redis
// Cluster specification: CRC16 of "123456789" is 0x31C3.
func TestHashSlot(t *testing.T) {
	require.Equal(t, uint16(0x31C3%16384), fenceredis.HashSlot("123456789"))
}

// multiOnCluster runs on TestCluster's cluster: names that share a hash slot
// are taken in one script; names in different slots get driver.ErrNotAtomic
// with nothing taken, and the Client takes them in order instead.
func multiOnCluster(t *testing.T, client *goredis.ClusterClient, node *goredis.Client) {
	ctx := testCtx(t)
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, client)})
	first := "acct-0"
	same, diff := "", ""
	for i := 1; same == "" || diff == ""; i++ {
		n := fmt.Sprintf("acct-%d", i)
		if fenceredis.HashSlot(n) == fenceredis.HashSlot(first) {
			same = n
		} else if diff == "" {
			diff = n
		}
	}
	s1, err := node.ClusterKeySlot(ctx, b.LeaseKey(first)).Result()
	require.NoError(t, err)
	s2, err := node.ClusterKeySlot(ctx, b.LeaseKey(same)).Result()
	require.NoError(t, err)
	require.Equal(t, s1, s2, "the server's slots of %q and %q", first, same)

	o := newOwner(t)
	tokens, err := acquireSet(ctx, b, []string{first, same}, o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, len(tokens))
	for _, n := range []string{first, same} {
		require.NoError(t, release(ctx, b, n, o))
	}

	_, err = acquireSet(ctx, b, []string{first, diff}, o, time.Minute)
	require.True(t, errors.Is(err, driver.ErrNotAtomic), "Acquire of a set across slots: %v; want ErrNotAtomic", err)
	for _, n := range []string{first, diff} {
		info, err := inspect(ctx, b, n)
		require.NoError(t, err)
		require.False(t, info.Held, "%q held after ErrNotAtomic", n)
	}
	set, err := lock.New(b, nil).TryAcquireMulti(ctx, []string{first, diff}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, set.Release(ctx))
}

// TestAcquireMultiNotAtomicSendsNothing: on a Ring (whose shards a script
// cannot span) and with WaitReplicas, Acquire of a set answers ErrNotAtomic
// before sending anything (the addresses here accept no connection).
func TestAcquireMultiNotAtomicSendsNothing(t *testing.T) {
	ctx := testCtx(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"s1": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	single := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = single.Close() })
	for name, b := range map[string]*fenceredis.Backend{
		"ring":         fenceredis.NewBackend(ring, nil),
		"WaitReplicas": fenceredis.NewBackend(single, &fenceredis.BackendOptions{WaitReplicas: 1}),
	} {
		_, err := acquireSet(ctx, b, []string{"a", "b"}, newOwner(t), time.Minute)
		require.True(t, errors.Is(err, driver.ErrNotAtomic), "%s: Acquire of a set = %v; want ErrNotAtomic", name, err)
	}
}
