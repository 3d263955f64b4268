package nats_test

import (
	"context"
	"testing"
	"time"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestList lists the held locks under a name prefix, sorted by name, with
// owner, token, TTL (by the server's clock) and metadata; names with '/'
// and '%' come back whole, released locks and another prefix's locks in
// the same bucket are left out.
func TestList(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	b := newBackend(t, js, bucket)
	other, err := fencenats.NewBackend(context.Background(), js, bucket, &fencenats.BackendOptions{Prefix: testkit.Namespace(t) + ".other"})
	require.NoError(t, err)
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
	ol, err := lock.New(other, nil).Acquire(ctx, "jobs/z", 10*time.Second)
	require.NoError(t, err)
	defer ol.Release(context.Background())

	infos, err := b.List(ctx, "jobs/")
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.Equal(t, "jobs/a%2F", infos[0].Name)
	got := infos[1]
	require.Len(t, got.Holders, 1)
	ttl := got.Holders[0].TTL
	require.True(t, ttl > 8*time.Second && ttl <= 10*time.Second, ttl)
	got.Holders[0].TTL = 0
	require.Equal(t, lock.Info{Name: "jobs/b", Holders: []lock.Holder{{Owner: leases[0].Owner(), Token: leases[0].Token(), Metadata: "host=a pid=1"}}}, got)

	infos, err = b.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, infos, 3)
	require.Equal(t, "jobsx", infos[2].Name)
}
