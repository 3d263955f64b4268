package redis_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestClusterClientReloadsSlotMapAfterConnectionError shows a ClusterClient
// as go-redis sees a cluster right after a master died: its slot map names
// a dead node, and the cluster's answer to CLUSTER SLOTS (here the
// ClusterSlots option) names the new master only once it is promoted.
// go-redis reloads the map by itself only after MOVED, ASK or READONLY, or
// every 60 s; the adapter asks for a reload after the connection errors, so
// calls reach the new master as soon as the cluster names it, and the
// writes that failed on the dead node were sent once and are not replayed.
func TestClusterClientReloadsSlotMapAfterConnectionError(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	live := testkit.Redis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now: dials are refused

	var loads atomic.Int32 // CLUSTER SLOTS answers given
	var promoted atomic.Bool
	client := goredis.NewClusterClient(&goredis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]goredis.ClusterSlot, error) {
			loads.Add(1)
			addr := dead
			if promoted.Load() {
				addr = live.Options().Addr
			}
			return []goredis.ClusterSlot{{Start: 0, End: 16383, Nodes: []goredis.ClusterNode{{Addr: addr}}}}, nil
		},
	})
	t.Cleanup(func() { _ = client.Close() })
	ns := testkit.RedisPrefix(t, live)
	s := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: ns})
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: ns})

	// The master is dead: every write fails on the connection, sent once.
	for range 10 {
		err := s.Put(ctx, "k", 1, []byte("lost"))
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
	eventually(t, 5*time.Second, "a slot-map reload after refused connections", func() bool { return loads.Load() >= 2 })
	t.Logf("%d CLUSTER SLOTS loads while the master was dead (10 failed writes)", loads.Load())

	// The cluster promotes a new master: the caller's next attempts reach
	// it, without a ReloadState call of its own.
	promoted.Store(true)
	before := loads.Load()
	start := time.Now()
	eventually(t, 5*time.Second, "a call reaching the new master", func() bool {
		_, err := s.Get(ctx, "k")
		return !errors.Is(err, syscall.ECONNREFUSED)
	})
	t.Logf("reached the new master %v after its promotion, %d loads later", time.Since(start), loads.Load()-before)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, fence.ErrNotFound, "a write that failed on the dead master was replayed")
	require.NoError(t, s.Put(ctx, "k", 1, []byte("v")))
	o := newOwner(t)
	_, err = acquire(ctx, b, "job", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "job", o))
}
