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
	"github.com/fencekit/fencekit/lock/driver"
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
//
// The counts are exact, so they must not depend on the clock. keep (in
// permit_lib.lua) runs PEXPIRE only when the keys' PTTL is below the new
// TTL, and a PTTL read within the millisecond of the last PEXPIRE still
// equals it: renewing with the same TTL would PEXPIRE or not by timing
// luck. So each step that renews keys which already have a TTL asks for a
// longer one than they ever had (PEXPIRE always runs), and one extend asks
// for a much shorter one (PEXPIRE never runs), which pins both branches.
func TestPermitCommandsPerOperation(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	a, other, w := newOwner(t), newOwner(t), newOwner(t)

	// Warm up: every script cached, the counter exists.
	_, err := acquirePermit(ctx, b, "s", a, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	require.NoError(t, extendPermit(ctx, b, "s", a, time.Minute))
	_, err = acquirePermit(ctx, b, "s", w, semaphore(1, time.Minute, time.Minute)) // subscribes
	requireHeld(t, err, "warm-up")
	require.NoError(t, leavePermitLine(ctx, b, "s", w))
	_, err = inspectPermits(ctx, b, "s")
	require.NoError(t, err)
	require.NoError(t, releasePermit(ctx, b, "s", a))

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
		_, err := acquirePermit(ctx, b, "s", a, semaphore(1, time.Minute, 0))
		return err
	})
	// The permit keys live a minute from the acquire just before: two
	// minutes lengthens them whatever the clock did in between.
	cost("acquire (own permit)", with(map[string]int64{"zcard": 2, "zrange": 1, "hget": 2, "zscore": 1, "zadd": 1, "pttl": 1, "pexpire": 2}), func() error {
		_, err := acquirePermit(ctx, b, "s", a, semaphore(1, 2*time.Minute, 0))
		return err
	})
	cost("acquire (refused, no place)", with(map[string]int64{"zcard": 2, "zrange": 2, "hget": 2, "zscore": 1}), func() error {
		_, err := acquirePermit(ctx, b, "s", other, semaphore(1, time.Minute, 0))
		requireHeld(t, err, "refused")
		return nil
	})
	cost("acquire (queued)", with(map[string]int64{"zcard": 2, "zrange": 3, "hget": 2, "zscore": 1, "zadd": 2, "hset": 1, "pttl": 1, "pexpire": 3}), func() error {
		_, err := acquirePermit(ctx, b, "s", w, semaphore(1, time.Minute, time.Minute))
		requireHeld(t, err, "queued")
		return nil
	})
	cost("extend (longer)", map[string]int64{"time": 1, "zscore": 1, "zadd": 1, "pttl": 1, "pexpire": 2}, func() error { return extendPermit(ctx, b, "s", a, 3*time.Minute) })
	// The keys now live three minutes: a one-minute renewal moves the
	// permit's expiry but leaves the keys' TTL, which still covers it.
	cost("extend (shorter)", map[string]int64{"time": 1, "zscore": 1, "zadd": 1, "pttl": 1}, func() error { return extendPermit(ctx, b, "s", a, time.Minute) })
	cost("inspect", map[string]int64{"time": 1, "hget": 2, "zcount": 1, "zrangebyscore": 1}, func() error {
		_, err := inspectPermits(ctx, b, "s")
		return err
	})
	cost("release (a waiter to wake)", with(map[string]int64{"zscore": 1, "zrem": 1, "hdel": 1, "exists": 1, "zrange": 1, "hget": 1, "zcard": 1, "publish": 1}), func() error {
		return releasePermit(ctx, b, "s", a)
	})
	cost("leave", with(map[string]int64{"zrem": 3, "hdel": 1, "zrange": 1}), func() error { return leavePermitLine(ctx, b, "s", w) })
	_, err = acquirePermit(ctx, b, "s", a, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	cost("release (nobody in line)", map[string]int64{"time": 1, "zscore": 1, "zrem": 1, "hdel": 1, "exists": 1}, func() error {
		return releasePermit(ctx, b, "s", a)
	})
	_, err = acquirePermit(ctx, b, "s", a, driver.Request{Kind: driver.Semaphore, Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
}
