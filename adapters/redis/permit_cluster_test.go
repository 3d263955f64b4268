package redis_test

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitsOnCluster (run by TestCluster): every permit key of a name is in
// the slot of its lease key, for awkward names too, and every permit
// operation works on names spread over all masters, wake-ups included
// (PUBLISH on one node reaches a subscriber on another).
func permitsOnCluster(t *testing.T, client *goredis.ClusterClient, node *goredis.Client) {
	ctx := testCtx(t)
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: "{x}" + testkit.RedisPrefix(t, client)})
	for _, name := range []string{"job", "}", "}x", "{}", "{a}b", "a}b{c", "%7D", "замок"} {
		want, err := node.ClusterKeySlot(ctx, b.LeaseKey(name)).Result()
		require.NoError(t, err)
		for _, k := range b.PermitKeys(name) {
			slot, err := node.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.Equal(t, want, slot, "permit %q: %s not in the lease's slot", name, k)
		}
	}

	masters := map[string]int{}
	for i := range 30 {
		name := fmt.Sprintf("rw-%d", i)
		w, r := newOwner(t), newOwner(t)
		wp, err := acquirePermit(ctx, b, name, w, writer(time.Minute, 0))
		require.NoError(t, err, name)
		_, err = acquirePermit(ctx, b, name, r, reader(time.Minute, time.Minute))
		requireHeld(t, err, name)
		require.NoError(t, extendPermit(ctx, b, name, w, time.Minute), name)
		info, err := inspectPermits(ctx, b, name)
		require.NoError(t, err, name)
		require.Len(t, info.Holders, 1, name)
		require.Equal(t, 1, info.Waiting, name)
		require.NoError(t, releasePermit(ctx, b, name, w), name)
		woken(t, b, name, r)
		rp, err := acquirePermit(ctx, b, name, r, reader(time.Minute, time.Minute))
		require.NoError(t, err, name)
		require.Equal(t, wp.Token, rp.PriorWriter, name)
		require.NoError(t, leavePermitLine(ctx, b, name, r), name)
		require.NoError(t, releasePermit(ctx, b, name, r), name)
		m, err := client.MasterForKey(ctx, b.PermitKeys(name)[0])
		require.NoError(t, err)
		masters[m.Options().Addr]++
	}
	require.Len(t, masters, 3, "names spread over every master")
	_, err := acquirePermit(ctx, b, "sem", newOwner(t), driver.Request{Kind: driver.Semaphore, Limit: 2, TTL: time.Minute})
	require.NoError(t, err)
}
