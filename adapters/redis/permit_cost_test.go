package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// commandsRun runs op and returns the commands the server ran for it, from
// INFO commandstats (reset first), without the CONFIG and INFO of the
// measurement itself.
func commandsRun(t *testing.T, ctx context.Context, c *goredis.Client, op func()) map[string]int64 {
	t.Helper()
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	op()
	info, err := c.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	got := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		if strings.HasPrefix(name, "config") || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, line)
		got[name] = n
	}
	return got
}

// TestPermitCommandsPerOperation counts the commands each permit script
// runs inside Redis (server time per operation; docs/redis.md lists them):
// a granted permit is fourteen, a release with nobody in line five, and a
// release that wakes a waiter reads the line and publishes once.
func TestPermitCommandsPerOperation(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	a, other, w := newOwner(t), newOwner(t), newOwner(t)

	// Warm up: every script cached, the counter exists.
	_, err := b.AcquirePermit(ctx, "s", a, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	require.NoError(t, b.ExtendPermit(ctx, "s", a, time.Minute))
	_, err = b.AcquirePermit(ctx, "s", w, semaphore(1, time.Minute, time.Minute)) // subscribes
	requireHeld(t, err, "warm-up")
	require.NoError(t, b.LeavePermitLine(ctx, "s", w))
	_, err = b.InspectPermits(ctx, "s")
	require.NoError(t, err)
	require.NoError(t, b.ReleasePermit(ctx, "s", a))

	cost := func(what string, want map[string]int64, op func() error) {
		t.Helper()
		got := commandsRun(t, ctx, c, func() { require.NoError(t, op(), what) })
		want["evalsha"] = 1
		require.Equal(t, want, got, "%s: commands run by the server", what)
	}
	base := map[string]int64{"time": 1, "zrangebyscore": 2} // the clock and the purge of expired entries
	with := func(m map[string]int64) map[string]int64 {
		for k, v := range base {
			m[k] += v
		}
		return m
	}
	cost("acquire (free)", with(map[string]int64{"zcard": 2, "zscore": 1, "hget": 1, "hmget": 1, "hset": 2, "zadd": 1, "pttl": 1, "pexpire": 2}), func() error {
		_, err := b.AcquirePermit(ctx, "s", a, semaphore(1, time.Minute, 0))
		return err
	})
	cost("acquire (own permit)", with(map[string]int64{"zcard": 2, "zrange": 1, "hget": 2, "zscore": 1, "zadd": 1, "pttl": 1, "pexpire": 2}), func() error {
		_, err := b.AcquirePermit(ctx, "s", a, semaphore(1, time.Minute, 0))
		return err
	})
	cost("acquire (refused, no place)", with(map[string]int64{"zcard": 2, "zrange": 2, "hget": 2, "zscore": 1}), func() error {
		_, err := b.AcquirePermit(ctx, "s", other, semaphore(1, time.Minute, 0))
		requireHeld(t, err, "refused")
		return nil
	})
	cost("acquire (queued)", with(map[string]int64{"zcard": 2, "zrange": 3, "hget": 2, "zscore": 1, "zadd": 2, "hset": 1, "pttl": 1, "pexpire": 3}), func() error {
		_, err := b.AcquirePermit(ctx, "s", w, semaphore(1, time.Minute, time.Minute))
		requireHeld(t, err, "queued")
		return nil
	})
	cost("extend", map[string]int64{"time": 1, "zscore": 1, "zadd": 1, "pttl": 1, "pexpire": 2}, func() error { return b.ExtendPermit(ctx, "s", a, time.Minute) })
	cost("inspect", map[string]int64{"time": 1, "hget": 2, "zcount": 1, "zrangebyscore": 1}, func() error {
		_, err := b.InspectPermits(ctx, "s")
		return err
	})
	cost("release (a waiter to wake)", with(map[string]int64{"zscore": 1, "zrem": 1, "hdel": 1, "exists": 1, "zrange": 1, "hget": 1, "zcard": 1, "publish": 1}), func() error {
		return b.ReleasePermit(ctx, "s", a)
	})
	cost("leave", with(map[string]int64{"zrem": 3, "hdel": 1, "zrange": 1}), func() error { return b.LeavePermitLine(ctx, "s", w) })
	_, err = b.AcquirePermit(ctx, "s", a, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	cost("release (nobody in line)", map[string]int64{"time": 1, "zscore": 1, "zrem": 1, "hdel": 1, "exists": 1}, func() error {
		return b.ReleasePermit(ctx, "s", a)
	})
	_, err = b.AcquirePermit(ctx, "s", a, lock.PermitRequest{Kind: lock.SemaphorePermit, Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
}
