package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// listCheck takes locks whose names hold glob and hash-tag characters, and
// checks that List returns the held ones under a prefix, sorted, with their
// holders and metadata, and leaves out released locks and other prefixes
// (another Backend's keys included).
func listCheck(t *testing.T, client goredis.UniversalClient) {
	ctx := testCtx(t)
	ns := testkit.RedisPrefix(t, client)
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: ns})
	other := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: ns + "x"})

	held := map[string]string{}
	names := []string{"jobs/b", "jobs/a", "jobs*/{x}", "jobs?/%7D", "other/x", "}"}
	for _, name := range names {
		o := newOwner(t)
		_, err := acquireMD(ctx, b, name, o, time.Minute, "md "+name)
		require.NoError(t, err, name)
		held[name] = o
	}
	_, err := acquire(ctx, other, "jobs/c", newOwner(t), time.Minute)
	require.NoError(t, err)
	freed := newOwner(t)
	_, err = acquire(ctx, b, "jobs/freed", freed, time.Minute)
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "jobs/freed", freed))

	infos, err := b.List(ctx, "jobs/")
	require.NoError(t, err)
	require.Equal(t, 2, len(infos), infos)
	for i, name := range []string{"jobs/a", "jobs/b"} {
		info := infos[i]
		require.Equal(t, name, info.Name)
		require.True(t, info.Held() && len(info.Holders) == 1, info)
		got := info.Holders[0]
		require.Equal(t, held[name], got.Owner)
		require.Equal(t, "md "+name, got.Metadata)
		require.True(t, got.Token.Valid() && got.TTL > 50*time.Second && got.TTL <= time.Minute, got)
		require.Zero(t, info.Waiting, info)
	}
	for prefix, want := range map[string][]string{
		"jobs*": {"jobs*/{x}"},
		"jobs?": {"jobs?/%7D"},
		"}":     {"}"},
		"":      {"jobs*/{x}", "jobs/a", "jobs/b", "jobs?/%7D", "other/x", "}"},
		"none":  nil,
	} {
		infos, err := b.List(ctx, prefix)
		require.NoError(t, err)
		var got []string
		for _, info := range infos {
			got = append(got, info.Name)
		}
		require.Equal(t, want, got, "List(%q)", prefix)
	}
}

func TestAdminList(t *testing.T) {
	t.Parallel()
	listCheck(t, testkit.Redis(t))
}

// On a Cluster, List walks every master.
func TestAdminListCluster(t *testing.T) {
	t.Parallel()
	listCheck(t, testkit.NewRedisCluster(t, 3).Client(t))
}
