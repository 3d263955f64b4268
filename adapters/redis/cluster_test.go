package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestCluster starts one 3-master Redis Cluster, with a replica behind the
// first master, and runs every cluster test on it.
func TestCluster(t *testing.T) {
	t.Parallel()
	cluster := testkit.NewRedisCluster(t, 3)
	cluster.AddReplica(t, 0)
	client := cluster.Client(t)

	t.Run("Conformance", func(t *testing.T) { conformance(t, client) })
	t.Run("Multi", func(t *testing.T) { multiOnCluster(t, client, cluster.Nodes[0].Client(t)) })     // multi_test.go
	t.Run("Permits", func(t *testing.T) { permitsOnCluster(t, client, cluster.Nodes[0].Client(t)) }) // permit_cluster_test.go

	t.Run("HashTags", func(t *testing.T) {
		ctx := testCtx(t)
		b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: "{x}" + testkit.RedisPrefix(t, client)})
		s := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: "p}{"})
		node := cluster.Nodes[0].Client(t)
		for _, name := range []string{"job", "}", "}x", "{}", "{a}b", "a}b{c", "%7D", "замок"} {
			lease, err := node.ClusterKeySlot(ctx, b.LeaseKey(name)).Result()
			require.NoError(t, err)
			counter, err := node.ClusterKeySlot(ctx, b.CounterKey(name)).Result()
			require.NoError(t, err)
			require.Equal(t, lease, counter, "lock %q: %s and %s in different slots", name, b.LeaseKey(name), b.CounterKey(name))
			for _, k := range []string{b.QueueKey(name), b.PlacesKey(name), b.QueuedKey(name)} {
				slot, err := node.ClusterKeySlot(ctx, k).Result()
				require.NoError(t, err)
				require.Equal(t, lease, slot, "lock %q: %s and %s in different slots", name, b.LeaseKey(name), k)
			}

			o := newOwner(t)
			tok, err := acquire(ctx, b, name, o, time.Minute)
			require.NoError(t, err, name)
			require.NoError(t, s.Put(ctx, name, tok, []byte(name)), name)
			require.NoError(t, release(ctx, b, name, o), name)
		}
	})

	t.Run("ManyNames", func(t *testing.T) {
		ctx := testCtx(t)
		ns := testkit.RedisPrefix(t, client)
		b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: ns})
		s := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: ns})
		masters := map[string]int{}
		for i := 0; i < 200; i++ {
			name := fmt.Sprintf("job-%d", i)
			o := newOwner(t)
			tok, err := acquire(ctx, b, name, o, time.Minute)
			require.NoError(t, err, name)
			require.NoError(t, extend(ctx, b, name, o, time.Minute), name)
			require.NoError(t, s.Put(ctx, name, tok, []byte(name)), name)
			require.NoError(t, s.Advance(ctx, name, tok), name)
			rec, err := s.Get(ctx, name)
			require.NoError(t, err, name)
			require.Equal(t, tok, rec.Fence)
			info, err := inspect(ctx, b, name)
			require.NoError(t, err, name)
			require.Equal(t, tok, info.Token)
			require.NoError(t, release(ctx, b, name, o), name)
			require.NoError(t, s.Delete(ctx, name, tok), name)
			m, err := client.MasterForKey(ctx, b.LeaseKey(name))
			require.NoError(t, err)
			masters[m.Options().Addr]++
		}
		t.Logf("200 locks per master: %v", masters)
		require.Len(t, masters, 3, "names spread over every master")
	})

	t.Run("NoScript", func(t *testing.T) {
		ctx := testCtx(t)
		ns := testkit.RedisPrefix(t, client)
		b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: ns})
		s := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: ns})
		for i := 0; i < 20; i++ {
			for _, n := range cluster.Nodes {
				require.NoError(t, n.Client(t).ScriptFlush(ctx).Err())
			}
			name := fmt.Sprintf("job-%d", i)
			o := newOwner(t)
			tok, err := acquire(ctx, b, name, o, time.Minute)
			require.NoError(t, err)
			require.NoError(t, s.Put(ctx, name, tok, nil))
			require.NoError(t, release(ctx, b, name, o))
		}
	})

	// Wait: the pipeline of script and WAIT goes to the master of the
	// lock's slot. Only the first master has a replica, so exactly the
	// names it owns are acknowledged; the others fail and are left free.
	// A pipeline sent to the wrong master would fail with MOVED instead.
	t.Run("Wait", func(t *testing.T) {
		ctx := testCtx(t)
		// A generous timeout where a replica must answer, a short one
		// where none can.
		prefix := testkit.RedisPrefix(t, client)
		withReplica := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
		without := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
		acked, refused := 0, 0
		for i := 0; i < 30; i++ {
			name := fmt.Sprintf("job-%d", i)
			m, err := client.MasterForKey(ctx, without.LeaseKey(name))
			require.NoError(t, err)
			replicated := m.Options().Addr == cluster.Nodes[0].Addr()
			b := without
			if replicated {
				b = withReplica
			}

			o := newOwner(t)
			tok, err := acquire(ctx, b, name, o, time.Minute)
			if replicated {
				require.NoError(t, err, name)
				require.True(t, tok.Valid())
				require.NoError(t, release(ctx, b, name, o))
				acked++
				continue
			}
			require.ErrorIs(t, err, fenceredis.ErrReplication, name)
			var re *fenceredis.ReplicationError
			require.True(t, errors.As(err, &re))
			require.Equal(t, 0, re.Got, "%v", err)
			info, err := inspect(ctx, b, name)
			require.NoError(t, err)
			require.False(t, info.Held, "%s left held: %+v", name, info)
			refused++
		}
		t.Logf("with a replica on one master of three: %d acquisitions acknowledged, %d refused and released", acked, refused)
		require.NotZero(t, acked)
		require.NotZero(t, refused)
	})

	// WaitFollowsASK migrates a slot from the second master to the first
	// (the one with a replica), with a lease and a store record in it. Keys
	// already moved are answered ASK by the source: the waiting calls follow
	// it to the target, with ASKING, instead of failing for the whole
	// migration. (A fresh lock, whose two keys exist nowhere yet, gets
	// TRYAGAIN on the target until the migration ends: transient, so
	// lock.Client retries it.)
	t.Run("WaitFollowsASK", func(t *testing.T) {
		ctx := testCtx(t)
		prefix := testkit.RedisPrefix(t, client)
		b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
		s := fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
		source, target := cluster.Nodes[1], cluster.Nodes[0]
		var name string
		for i := 0; name == ""; i++ {
			n := fmt.Sprintf("ask-%d", i)
			m, err := client.MasterForKey(ctx, b.LeaseKey(n))
			require.NoError(t, err)
			if m.Options().Addr == source.Addr() {
				name = n
			}
		}
		plain := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix})
		o := newOwner(t)
		tok, err := acquire(ctx, plain, name, o, time.Minute)
		require.NoError(t, err)

		slot, err := source.Client(t).ClusterKeySlot(ctx, b.LeaseKey(name)).Result()
		require.NoError(t, err)
		sl := strconv.FormatInt(slot, 10)
		sourceID, err := source.Do("CLUSTER", "MYID")
		require.NoError(t, err)
		targetID, err := target.Do("CLUSTER", "MYID")
		require.NoError(t, err)
		_, err = target.Do("CLUSTER", "SETSLOT", sl, "IMPORTING", sourceID)
		require.NoError(t, err)
		_, err = source.Do("CLUSTER", "SETSLOT", sl, "MIGRATING", targetID)
		require.NoError(t, err)
		t.Cleanup(func() {
			// Finish the migration: the slot now belongs to the target.
			for _, n := range cluster.Nodes {
				_, _ = n.Do("CLUSTER", "SETSLOT", sl, "NODE", targetID)
			}
			client.ReloadState(context.Background())
		})
		for _, key := range []string{b.LeaseKey(name), b.CounterKey(name)} {
			_, err := source.Do("MIGRATE", "127.0.0.1", strconv.Itoa(target.Port()), key, "0", "5000")
			require.NoError(t, err, "MIGRATE %s", key)
		}

		again, err := acquire(ctx, b, name, o, time.Minute)
		require.NoError(t, err, "a waiting re-acquire of a lease that has moved to the target")
		require.Equal(t, tok, again)
		require.NoError(t, s.Put(ctx, name, tok, []byte("during the migration")), "a waiting write of a new key in the migrating slot")
		for node, want := range map[*testkit.RedisServer]string{source: "0", target: "3"} {
			n, err := node.Do("CLUSTER", "COUNTKEYSINSLOT", sl)
			require.NoError(t, err)
			require.Equal(t, want, n, "keys in slot %s on %s: lease, counter and record on the target", sl, node.Addr())
		}
		t.Logf("slot %d migrating from %s to %s: re-acquire of %q and a store write followed ASK", slot, source.Addr(), target.Addr(), name)
		require.NoError(t, release(ctx, b, name, o))
	})
}
