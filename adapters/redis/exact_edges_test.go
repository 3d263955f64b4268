package redis_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

const giga = int64(1_000_000_000)

// TestStoreExactNearTheTop climbs ladders where the scripts' comparison
// has to fall back from doubles to the two halves of the digits: one apart
// near 2^63 (equal as doubles), across a multiple of 10^9 (the first ten
// digits differ by one, the last nine wrap), and across 10^18 (the first
// 19-digit token). Every step refuses the previous token with the exact
// fence, and accepts the same token again.
func TestStoreExactNearTheTop(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	s := fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, c)})

	top := fence.Token(math.MaxInt64)
	boundary := fence.Token(math.MaxInt64 / giga * giga)
	ladders := map[string][]fence.Token{
		"e18":      {fence.Token(giga*giga - 1), fence.Token(giga * giga), fence.Token(giga*giga + 1)},
		"boundary": {boundary - 2, boundary - 1, boundary, boundary + 1, boundary + 1023},
		"top":      {top - 2048, top - 1024, top - 513, top - 512, top - 2, top - 1, top},
	}
	for key, ladder := range ladders {
		for j, tok := range ladder {
			require.NoError(t, s.Put(ctx, key, tok, []byte(tok.String())), "%s: Put %d", key, tok)
			require.NoError(t, s.Put(ctx, key, tok, []byte(tok.String())), "%s: Put %d again (equal is accepted)", key, tok)
			require.NoError(t, s.Advance(ctx, key, tok), "%s: Advance %d (equal)", key, tok)
			rec, err := s.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tok, rec.Fence)
			for _, prev := range ladder[:j] {
				for op, err := range map[string]error{
					"Put":     s.Put(ctx, key, prev, []byte("late")),
					"Advance": s.Advance(ctx, key, prev),
					"Delete":  s.Delete(ctx, key, prev),
				} {
					var stale *fence.StaleError
					require.ErrorAs(t, err, &stale, "%s: %s with %d after %d", key, op, prev, tok)
					require.Equal(t, fence.StaleError{Key: key, Token: prev, Fence: tok}, *stale)
				}
			}
			rec, err = s.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tok.String(), string(rec.Value), "%s: a refused write changed the value", key)
		}
	}
}

// TestAcquireCounterPaths covers the mint's paths one by one: the clock
// ahead of the counter (the common one), the counter ahead of the clock
// with and without an idle expiry, a counter whose next value gains a
// digit, and a counter that is not a number, which fails the acquire and
// writes nothing.
func TestAcquireCounterPaths(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	ns := testkit.RedisPrefix(t, c)
	idle := time.Hour
	withIdle := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: ns, CounterIdle: idle})
	never := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: ns + "n", CounterIdle: -1})

	cycle := func(b *fenceredis.Backend, name string) fence.Token {
		t.Helper()
		o := newOwner(t)
		tok, err := acquire(ctx, b, name, o, time.Minute)
		require.NoError(t, err)
		info, err := inspect(ctx, b, name)
		require.NoError(t, err)
		require.Equal(t, tok, info.Token)
		require.Equal(t, tok.String(), c.Get(ctx, b.CounterKey(name)).Val(), "the counter holds the last token")
		require.NoError(t, release(ctx, b, name, o))
		return tok
	}

	for _, b := range []*fenceredis.Backend{withIdle, never} {
		wantTTL := func(what string) {
			t.Helper()
			pttl, err := c.PTTL(ctx, b.CounterKey("clock")).Result()
			if b == never {
				pttl, err = c.PTTL(ctx, b.CounterKey(what)).Result()
				require.NoError(t, err)
				require.Equal(t, time.Duration(-1), pttl, "%s: a counter that never expires", what)
				return
			}
			pttl, err = c.PTTL(ctx, b.CounterKey(what)).Result()
			require.NoError(t, err)
			require.Greater(t, pttl, idle-time.Minute, "%s: the counter's idle expiry", what)
			require.LessOrEqual(t, pttl, idle)
		}

		// Clock ahead: the token is the server time in µs.
		before := time.Now().UnixMicro()
		tok := cycle(b, "clock")
		require.Greater(t, int64(tok), before-int64(time.Minute/time.Microsecond), "a token from the clock")
		wantTTL("clock")
		next := cycle(b, "clock")
		require.Greater(t, next, tok)

		// Counter ahead, with an expiry of its own that the acquire resets.
		for _, start := range []int64{1 << 60, giga*giga - 1, math.MaxInt64 - 2} {
			require.NoError(t, c.Set(ctx, b.CounterKey("ahead"), strconv.FormatInt(start, 10), 5*time.Second).Err())
			require.Equal(t, fence.Token(start+1), cycle(b, "ahead"), "counter %d", start)
			wantTTL("ahead")
		}

		// Not a number: INCR's error, no lease, the counter as it was.
		require.NoError(t, c.Set(ctx, b.CounterKey("junk"), "junk", 0).Err())
		_, err := acquire(ctx, b, "junk", newOwner(t), time.Minute)
		require.Error(t, err)
		require.False(t, errors.Is(err, lock.ErrHeld))
		require.Equal(t, "junk", c.Get(ctx, b.CounterKey("junk")).Val())
		require.EqualValues(t, 0, c.Exists(ctx, b.LeaseKey("junk")).Val(), "a failed acquire left a lease")
	}
}

// TestCommandsPerOperation counts, with INFO commandstats on a server of
// the test's own, the commands each script runs inside Redis: they decide
// the server time per operation, which decides throughput once Redis is
// saturated (docs/benchmarks.md). The common acquire is five, a release or
// a fenced write two; a queued acquire with nobody waiting is the acquire's
// five and one more (a ZCARD of the empty queue). A release reads the owner
// alone (HGET, as before queued waiting), and a release with waiters reads
// the queue and publishes once. Inspect of a lock reads the holder (HMGET,
// PTTL) and counts its line: one ZCARD when nobody waits, then the clock and
// a ZCOUNT of the live places when someone does.
func TestCommandsPerOperation(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	s := fenceredis.NewStore(c, nil)
	a, other := newOwner(t), newOwner(t)

	// Warm up: every script cached, the counter and the record exist.
	_, err := acquire(ctx, b, "job", a, time.Minute)
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "job", a))
	_, err = enqueue(ctx, b, "job", a, time.Minute, time.Minute) // caches queue.lua
	require.NoError(t, err)
	_, err = inspect(ctx, b, "job") // caches inspect.lua
	require.NoError(t, err)
	require.NoError(t, release(ctx, b, "job", a))
	require.NoError(t, s.Put(ctx, "k", 1, []byte("v")))

	count := func(what string, op func() error, want map[string]int64) {
		t.Helper()
		require.NoError(t, c.ConfigResetStat(ctx).Err())
		require.NoError(t, op(), what)
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
		want["evalsha"] = 1
		require.Equal(t, want, got, "%s: commands run by the server", what)
	}
	var tok fence.Token
	count("acquire (free)", func() (err error) { tok, err = acquire(ctx, b, "job", a, time.Minute); return err },
		map[string]int64{"hget": 1, "time": 1, "set": 1, "hset": 1, "pexpire": 1})
	count("acquire (own lease)", func() error {
		again, err := acquire(ctx, b, "job", a, time.Minute)
		if err == nil && again != tok {
			err = errors.New("the owner's acquire changed the token")
		}
		return err
	}, map[string]int64{"hget": 2, "hset": 1, "pexpire": 1})
	count("acquire (held)", func() error {
		if _, err := acquire(ctx, b, "job", other, time.Minute); !errors.Is(err, lock.ErrHeld) {
			return errors.New("held lock acquired")
		}
		return nil
	}, map[string]int64{"hget": 1, "pttl": 1})
	count("inspect (nobody waits)", func() error {
		info, err := inspect(ctx, b, "job")
		if err == nil && (info.Owner != a || info.Waiting != 0) {
			err = fmt.Errorf("inspect: %+v", info)
		}
		return err
	}, map[string]int64{"zcard": 1, "hmget": 1, "pttl": 1})
	// One DEL removes the lease and the flag "someone waits" (queue.go),
	// and says whether it was there.
	count("release", func() error { return release(ctx, b, "job", a) }, map[string]int64{"hget": 1, "del": 1})
	// Queued acquire with nobody waiting: acquire's commands and one zcard.
	count("acquire or enqueue (free, nobody waits)", func() error {
		_, err := enqueue(ctx, b, "job", a, time.Minute, time.Minute)
		return err
	}, map[string]int64{"zcard": 1, "hget": 1, "time": 1, "set": 1, "hset": 1, "pexpire": 1})
	// With a waiter in line, the release finds the flag and wakes it.
	waiter := newOwner(t)
	_, err = enqueue(ctx, b, "job", waiter, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	count("inspect (a waiter in line)", func() error {
		info, err := inspect(ctx, b, "job")
		if err == nil && (info.Owner != a || info.Waiting != 1) {
			err = fmt.Errorf("inspect: %+v", info)
		}
		return err
	}, map[string]int64{"zcard": 1, "time": 1, "zcount": 1, "hmget": 1, "pttl": 1})
	count("release (a waiter in line)", func() error { return release(ctx, b, "job", a) },
		map[string]int64{"hget": 1, "del": 1, "zrange": 1, "publish": 1})
	require.NoError(t, leave(ctx, b, "job", waiter))
	count("Store.Put", func() error { return s.Put(ctx, "k", 2, []byte("v")) }, map[string]int64{"hget": 1, "hset": 1})
}

// TestClockTokenIsServerTime mints from the clock (the counter deleted
// before every acquire) until it has seen tokens whose microsecond part
// needs padding (below 100000), and checks each against the server's TIME
// read before and after: the token is that time in microseconds, digit for
// digit.
func TestClockTokenIsServerTime(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	padded := 0
	for i := 0; i < 2000 && padded < 3; i++ {
		require.NoError(t, c.Del(ctx, b.CounterKey("clock")).Err())
		before, err := c.Time(ctx).Result()
		require.NoError(t, err)
		o := newOwner(t)
		tok, err := acquire(ctx, b, "clock", o, time.Minute)
		require.NoError(t, err)
		after, err := c.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, release(ctx, b, "clock", o))
		require.GreaterOrEqual(t, int64(tok), before.UnixMicro(), "token below the server time before the acquire")
		require.LessOrEqual(t, int64(tok), after.UnixMicro(), "token above the server time after the acquire")
		if int64(tok)%1_000_000 < 100_000 {
			padded++
		}
	}
	require.Equal(t, 3, padded, "no token with a microsecond part below 100000 in 2000 acquires")
}
