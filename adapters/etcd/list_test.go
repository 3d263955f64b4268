package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestList lists the held locks under a prefix, sorted by name, with
// owner, token, TTL and metadata; names with '/' and '%' come back whole,
// and released locks are left out.
func TestList(t *testing.T) {
	b := etcd.NewBackend(sharedClient(t), &etcd.BackendOptions{Prefix: prefix(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := lock.New(b, &lock.Options{Metadata: "host=a pid=1"})
	var leases []*lock.Lease
	for _, name := range []string{"jobs/b", "jobs/a%2F", "jobsx", "jobs/c"} {
		l, err := c.Acquire(ctx, name, 10*time.Second)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	require.NoError(t, leases[3].Release(ctx))

	infos, err := b.List(ctx, "jobs/")
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.Equal(t, "jobs/a%2F", infos[0].Name)
	got := infos[1]
	require.Len(t, got.Holders, 1)
	h := &got.Holders[0]
	require.True(t, h.TTL > 0 && h.TTL <= 10*time.Second, h.TTL)
	h.TTL = 0
	require.Equal(t, lock.Info{Name: "jobs/b", Holders: []lock.Holder{{Owner: leases[0].Owner(), Token: leases[0].Token(), Metadata: "host=a pid=1"}}}, got)

	infos, err = b.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, infos, 3)
}
