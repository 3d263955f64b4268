package redis_test

import (
	"errors"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestStoreExactTokens climbs through the tokens where a double or an
// unpadded string comparison goes wrong; each step must refuse the previous
// token with the exact fence.
func TestStoreExactTokens(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	s := fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, c)})

	ladders := [][]fence.Token{
		{9, 10},
		{1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<63 - 2, 1<<63 - 1},
	}
	for i, ladder := range ladders {
		key := "ladder" + string(rune('a'+i))
		for j, tok := range ladder {
			require.NoError(t, s.Put(ctx, key, tok, []byte(tok.String())), "Put %d", tok)
			rec, err := s.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tok, rec.Fence)
			require.Equal(t, tok.String(), string(rec.Value))
			if j == 0 {
				continue
			}
			prev := ladder[j-1]
			for op, err := range map[string]error{
				"Put":     s.Put(ctx, key, prev, []byte("late")),
				"Advance": s.Advance(ctx, key, prev),
				"Delete":  s.Delete(ctx, key, prev),
			} {
				var stale *fence.StaleError
				require.ErrorAs(t, err, &stale, "%s with %d after %d", op, prev, tok)
				require.Equal(t, fence.StaleError{Key: key, Token: prev, Fence: tok}, *stale)
			}
		}
	}

	// The fence is stored fixed-width, so that digit-by-digit comparison is
	// numeric comparison.
	f, err := c.HGet(ctx, s.Key("laddera"), "fence").Result()
	require.NoError(t, err)
	require.Equal(t, "0000000000000000010", f)
	f, err = c.HGet(ctx, s.Key("ladderb"), "fence").Result()
	require.NoError(t, err)
	require.Equal(t, "9223372036854775807", f)
}

func TestStoreRecordLayout(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	ns := testkit.RedisPrefix(t, c)
	s := fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: ns})
	require.Equal(t, ns+":{k}", s.Key("k"))
	require.Equal(t, ns+":{a%7Db}", s.Key("a}b"))

	require.NoError(t, s.Put(ctx, "k", 5, nil))
	h, err := c.HGetAll(ctx, s.Key("k")).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"value": "", "fence": "0000000000000000005"}, h)
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.NotNil(t, rec.Value, "a nil value reads back as a non-nil empty slice")
	require.Empty(t, rec.Value)

	require.NoError(t, s.Delete(ctx, "k", 6))
	h, err = c.HGetAll(ctx, s.Key("k")).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"fence": "0000000000000000006"}, h, "a tombstone keeps the fence")
	rec, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, fence.ErrNotFound)
	require.Equal(t, fence.Record{Fence: 6}, rec)

	require.NoError(t, s.Put(ctx, "k", 6, []byte("back")))
	h, err = c.HGetAll(ctx, s.Key("k")).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"value": "back", "fence": "0000000000000000006"}, h)

	require.NoError(t, s.Advance(ctx, "only-advanced", 3))
	rec, err = s.Get(ctx, "only-advanced")
	require.True(t, errors.Is(err, fence.ErrNotFound))
	require.Equal(t, fence.Token(3), rec.Fence)
}

// TestStoreRefusesRing: a Ring re-hashes keys over its live shards, so a
// record can be looked up on a shard that never saw it (no fence: any token
// accepted) and acknowledged writes vanish when a shard comes back. A Store
// on a Ring refuses every call with fence.ErrInvalid and sends nothing.
func TestStoreRefusesRing(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	rt := &roundTrips{}
	ring.AddHook(rt)
	ctx := testCtx(t)
	for _, client := range []fenceredis.Client{ring, goredis.UniversalClient(ring)} {
		s := fenceredis.NewStore(client, nil)
		for name, op := range map[string]func() error{
			"Put":     func() error { return s.Put(ctx, "k", 1, []byte("v")) },
			"Delete":  func() error { return s.Delete(ctx, "k", 1) },
			"Advance": func() error { return s.Advance(ctx, "k", 1) },
			"Get":     func() error { _, err := s.Get(ctx, "k"); return err },
		} {
			err := op()
			require.ErrorIs(t, err, fence.ErrInvalid, name)
			require.ErrorContains(t, err, "Ring", name)
		}
	}
	n, sent := rt.take()
	require.Zero(t, n, "sent %v", sent)
}
