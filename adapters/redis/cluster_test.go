package redis_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestCluster starts one 3-master Redis Cluster, with a replica behind the
// first master, and runs every cluster test on it.
func TestCluster(t *testing.T) {
	t.Parallel()
	cluster := testkit.NewRedisCluster(t, 3)
	cluster.AddReplica(t, 0)
	client := cluster.Client(t)

	t.Run("Conformance", func(t *testing.T) { conformance(t, client) })

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

			o := newOwner(t)
			tok, err := b.Acquire(ctx, name, o, time.Minute)
			require.NoError(t, err, name)
			require.NoError(t, s.Put(ctx, name, tok, []byte(name)), name)
			require.NoError(t, b.Release(ctx, name, o), name)
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
			tok, err := b.Acquire(ctx, name, o, time.Minute)
			require.NoError(t, err, name)
			require.NoError(t, b.Extend(ctx, name, o, time.Minute), name)
			require.NoError(t, s.Put(ctx, name, tok, []byte(name)), name)
			require.NoError(t, s.Advance(ctx, name, tok), name)
			rec, err := s.Get(ctx, name)
			require.NoError(t, err, name)
			require.Equal(t, tok, rec.Fence)
			info, err := b.Inspect(ctx, name)
			require.NoError(t, err, name)
			require.Equal(t, tok, info.Token)
			require.NoError(t, b.Release(ctx, name, o), name)
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
			tok, err := b.Acquire(ctx, name, o, time.Minute)
			require.NoError(t, err)
			require.NoError(t, s.Put(ctx, name, tok, nil))
			require.NoError(t, b.Release(ctx, name, o))
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
			tok, err := b.Acquire(ctx, name, o, time.Minute)
			if replicated {
				require.NoError(t, err, name)
				require.True(t, tok.Valid())
				require.NoError(t, b.Release(ctx, name, o))
				acked++
				continue
			}
			require.ErrorIs(t, err, fenceredis.ErrReplication, name)
			var re *fenceredis.ReplicationError
			require.True(t, errors.As(err, &re))
			require.Equal(t, 0, re.Got, "%v", err)
			info, err := b.Inspect(ctx, name)
			require.NoError(t, err)
			require.False(t, info.Held, "%s left held: %+v", name, info)
			refused++
		}
		t.Logf("with a replica on one master of three: %d acquisitions acknowledged, %d refused and released", acked, refused)
		require.NotZero(t, acked)
		require.NotZero(t, refused)
	})
}
