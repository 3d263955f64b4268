package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// serverMicros returns the server's TIME in microseconds.
func serverMicros(t *testing.T, c goredis.Cmdable) int64 {
	now, err := c.Time(testCtx(t)).Result()
	require.NoError(t, err)
	return now.UnixMicro()
}

func TestTokenComesFromServerClock(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})

	before := serverMicros(t, c)
	tok, err := acquire(ctx, b, "job", newOwner(t), time.Minute)
	require.NoError(t, err)
	after := serverMicros(t, c)
	require.GreaterOrEqual(t, int64(tok), before, "a fresh counter jumps to the server clock")
	require.LessOrEqual(t, int64(tok), after)
	t.Logf("server TIME before %d, token %d, after %d", before, tok, after)
}

func TestHeldErrorCarriesTTL(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})

	_, err := acquire(ctx, b, "job", newOwner(t), 10*time.Second)
	require.NoError(t, err)
	_, err = acquire(ctx, b, "job", newOwner(t), time.Second)
	require.ErrorIs(t, err, lock.ErrHeld)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "job", held.Name)
	require.Greater(t, held.TTL, 9*time.Second)
	require.LessOrEqual(t, held.TTL, 10*time.Second)
}

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	ns := testkit.RedisPrefix(t, c)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: ns})

	require.Equal(t, ns+":{job}:lease", b.LeaseKey("job"))
	require.Equal(t, ns+":{job}:counter", b.CounterKey("job"))
	// Braces and '%' are escaped, so the hash tag is always the whole name
	// and different names never share keys.
	require.Equal(t, ns+":{%7Dx%7B%25}:lease", b.LeaseKey("}x{%"))
	require.NotEqual(t, b.LeaseKey("}"), b.LeaseKey("%7D"))

	o := newOwner(t)
	tok, err := acquireMD(ctx, b, "job", o, time.Minute, "pid=1")
	require.NoError(t, err)
	lease, err := c.HGetAll(ctx, b.LeaseKey("job")).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"owner": o, "token": tok.String(), "metadata": "pid=1"}, lease)
	counter, err := c.Get(ctx, b.CounterKey("job")).Result()
	require.NoError(t, err)
	require.Equal(t, tok.String(), counter)

	pttl, err := c.PTTL(ctx, b.LeaseKey("job")).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, 59*time.Second)
	idle, err := c.PTTL(ctx, b.CounterKey("job")).Result()
	require.NoError(t, err)
	require.Greater(t, idle, fenceredis.DefaultCounterIdle-time.Minute, "the counter expires after the default idle period")

	require.NoError(t, release(ctx, b, "job", o))
	n, err := c.Exists(ctx, b.LeaseKey("job"), b.CounterKey("job")).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "release deletes the lease and keeps the counter")
}

func TestCounterNeverExpiresWhenNegative(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c), CounterIdle: -1})
	_, err := acquire(ctx, b, "job", newOwner(t), time.Minute)
	require.NoError(t, err)
	pttl, err := c.PTTL(ctx, b.CounterKey("job")).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), pttl, "PTTL -1: no expiry")
}

// TestCounterExpiry lets the counter expire after its idle period: the next
// token still comes out higher, from the server clock.
func TestCounterExpiry(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c), CounterIdle: 50 * time.Millisecond})

	var last fence.Token
	for i := 0; i < 3; i++ {
		o := newOwner(t)
		tok, err := acquire(ctx, b, "job", o, time.Minute)
		require.NoError(t, err)
		require.Greater(t, tok, last)
		pttl, err := c.PTTL(ctx, b.CounterKey("job")).Result()
		require.NoError(t, err)
		require.LessOrEqual(t, pttl, 50*time.Millisecond)
		require.NoError(t, release(ctx, b, "job", o))
		eventually(t, 10*time.Second, "counter key expired", func() bool {
			return c.Exists(ctx, b.CounterKey("job")).Val() == 0
		})
		t.Logf("acquisition %d: token %d, then the counter expired", i+1, tok)
		last = tok
	}
}

// TestTokenArithmeticIsExact puts the counter where doubles lose integers and
// at the top of the token range.
func TestTokenArithmeticIsExact(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})

	for _, start := range []int64{1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<53 + 2, math.MaxInt64 - 1} {
		require.NoError(t, c.Set(ctx, b.CounterKey("job"), strconv.FormatInt(start, 10), 0).Err())
		o := newOwner(t)
		tok, err := acquire(ctx, b, "job", o, time.Minute)
		require.NoError(t, err)
		require.Equal(t, fence.Token(start+1), tok, "counter %d", start)
		info, err := inspect(ctx, b, "job")
		require.NoError(t, err)
		require.Equal(t, tok, info.Token)
		require.NoError(t, release(ctx, b, "job", o))
	}

	// The counter is at MaxToken: there is no next token. The script fails
	// before writing anything.
	_, err := acquire(ctx, b, "job", newOwner(t), time.Minute)
	require.Error(t, err)
	require.False(t, errors.Is(err, lock.ErrHeld))
	t.Logf("acquire after MaxToken: %v", err)
	info, err := inspect(ctx, b, "job")
	require.NoError(t, err)
	require.False(t, info.Held)
	require.Equal(t, strconv.FormatInt(math.MaxInt64, 10), c.Get(ctx, b.CounterKey("job")).Val())
}

// TestRoundTrips counts network round trips with a go-redis hook: one per
// operation once the scripts are cached on the server. Inspect of a lock
// reads its holder and counts its line in that one round trip.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c, rt := counted(t, srv.Addr())
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	s := fenceredis.NewStore(c, nil)
	a, other := newOwner(t), newOwner(t)

	// Warm up: connect, and cache every script (EVALSHA, NOSCRIPT, EVAL).
	_, err := acquire(ctx, b, "warm", a, time.Minute)
	require.NoError(t, err)
	require.NoError(t, extend(ctx, b, "warm", a, time.Minute))
	_, err = inspect(ctx, b, "warm")
	require.NoError(t, err)
	_, err = enqueue(ctx, b, "warm", other, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, leave(ctx, b, "warm", other))
	require.NoError(t, release(ctx, b, "warm", a))
	require.NoError(t, s.Put(ctx, "warm", 1, nil))
	require.NoError(t, s.Advance(ctx, "warm", 1))
	require.NoError(t, s.Delete(ctx, "warm", 1))
	_, _ = s.Get(ctx, "warm")
	n, sent := rt.take()
	t.Logf("warm-up with a cold script cache: %d round trips: %v", n, sent)

	var tok fence.Token
	ops := []struct {
		name string
		run  func() error
	}{
		{"Acquire (free)", func() (err error) { tok, err = acquire(ctx, b, "job", a, time.Minute); return err }},
		{"Acquire (same owner)", func() error { _, err := acquire(ctx, b, "job", a, time.Minute); return err }},
		{"Acquire (metadata)", func() error {
			_, err := acquireMD(ctx, b, "job", a, time.Minute, "host=a pid=1")
			return err
		}},
		{"Acquire (held)", func() error {
			_, err := acquire(ctx, b, "job", other, time.Minute)
			if errors.Is(err, lock.ErrHeld) {
				return nil
			}
			return err
		}},
		{"Extend", func() error { return extend(ctx, b, "job", a, time.Minute) }},
		{"Inspect", func() error {
			info, err := inspect(ctx, b, "job")
			if err == nil && info.Metadata != "host=a pid=1" {
				return fmt.Errorf("Inspect reported metadata %q", info.Metadata)
			}
			if err == nil && info.Waiting != 0 {
				return fmt.Errorf("Inspect reported %d waiting; want 0", info.Waiting)
			}
			return err
		}},
		{"Acquire (queued)", func() error {
			_, err := enqueue(ctx, b, "job", other, time.Minute, time.Minute)
			if errors.Is(err, lock.ErrHeld) {
				return nil
			}
			return err
		}},
		{"Inspect (a waiter in line)", func() error {
			info, err := inspect(ctx, b, "job")
			if err == nil && (info.Owner != a || info.Token != tok || info.Waiting != 1) {
				return fmt.Errorf("Inspect reported %+v; want a's lease and 1 waiting", info)
			}
			return err
		}},
		{"Leave", func() error { return leave(ctx, b, "job", other) }},
		{"Put", func() error { return s.Put(ctx, "k", tok, []byte("v")) }},
		{"Put (stale)", func() error {
			if err := s.Put(ctx, "k", tok-1, []byte("v")); !errors.Is(err, fence.ErrStale) {
				return err
			}
			return nil
		}},
		{"Get", func() error { _, err := s.Get(ctx, "k"); return err }},
		{"Advance", func() error { return s.Advance(ctx, "k", tok) }},
		{"Delete", func() error { return s.Delete(ctx, "k", tok) }},
		{"Release", func() error { return release(ctx, b, "job", a) }},
	}
	for _, op := range ops {
		require.NoError(t, op.run(), op.name)
		n, sent := rt.take()
		t.Logf("%-26s %d round trip(s): %v", op.name, n, sent)
		require.Equal(t, 1, n, "%s: round trips %v", op.name, sent)
	}
}

// TestInvalidInputSendsNothing checks that refused input, and a context that
// has already ended, never reach the server. Lock input is refused by the
// lock.Client over the Backend (the driver leaves it to the Client); a
// Client never sends an Extend or a Release of a name or owner it did not
// check when it acquired (a Lease carries them), so those have no case here.
func TestInvalidInputSendsNothing(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c, rt := counted(t, srv.Addr())
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	s := fenceredis.NewStore(c, nil)
	o := newOwner(t)
	client := lock.New(b, nil)
	lease, err := client.TryAcquire(ctx, "held", time.Minute)
	require.NoError(t, err)
	rt.take()

	invalid := map[string]func() error{
		"Acquire empty name":   func() error { _, err := client.TryAcquire(ctx, "", time.Second); return err },
		"Acquire empty owner":  func() error { _, err := client.Resume(ctx, "n", "", time.Second); return err },
		"Acquire NUL in owner": func() error { _, err := client.Resume(ctx, "n", "o\x00", time.Second); return err },
		"Acquire ttl 0":        func() error { _, err := client.TryAcquire(ctx, "n", 0); return err },
		"Acquire ttl 999µs":    func() error { _, err := client.TryAcquire(ctx, "n", 999*time.Microsecond); return err },
		"Acquire NUL in name":  func() error { _, err := client.TryAcquire(ctx, "n\x00", time.Second); return err },
		"Extend ttl -1s":       func() error { return lease.Extend(ctx, -time.Second) },
		"Inspect empty name":   func() error { _, err := client.Inspect(ctx, ""); return err },
		"Inspect bad UTF-8":    func() error { _, err := client.Inspect(ctx, "\xff"); return err },
		"Put token 0":          func() error { return s.Put(ctx, "k", 0, []byte("v")) },
		"Put token -1":         func() error { return s.Put(ctx, "k", -1, []byte("v")) },
		"Put empty key":        func() error { return s.Put(ctx, "", 1, []byte("v")) },
		"Put key too long":     func() error { return s.Put(ctx, string(make([]byte, fence.MaxKeyLen+1)), 1, nil) },
		"Delete token 0":       func() error { return s.Delete(ctx, "k", 0) },
		"Delete empty key":     func() error { return s.Delete(ctx, "", 1) },
		"Advance token MinInt": func() error { return s.Advance(ctx, "k", math.MinInt64) },
		"Advance empty key":    func() error { return s.Advance(ctx, "", 1) },
		"Get empty key":        func() error { _, err := s.Get(ctx, ""); return err },
	}
	for name, op := range invalid {
		require.ErrorIs(t, op(), fence.ErrInvalid, name)
		n, sent := rt.take()
		require.Zero(t, n, "%s sent %v", name, sent)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	ended := map[string]func() error{
		"Acquire": func() error { _, err := acquire(done, b, "n", o, time.Second); return err },
		"Extend":  func() error { return extend(done, b, "n", o, time.Second) },
		"Release": func() error { return release(done, b, "n", o) },
		"Inspect": func() error { _, err := inspect(done, b, "n"); return err },
		"Put":     func() error { return s.Put(done, "k", 1, nil) },
		"Get":     func() error { _, err := s.Get(done, "k"); return err },
		"Delete":  func() error { return s.Delete(done, "k", 1) },
		"Advance": func() error { return s.Advance(done, "k", 1) },
	}
	for name, op := range ended {
		require.ErrorIs(t, op(), context.Canceled, name)
		n, sent := rt.take()
		require.Zero(t, n, "%s with an ended context sent %v", name, sent)
	}
}

func TestNilClientRefused(t *testing.T) {
	ctx := testCtx(t)
	b := fenceredis.NewBackend(nil, nil)
	s := fenceredis.NewStore(nil, nil)
	_, err := acquire(ctx, b, "n", "o", time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.ErrorIs(t, extend(ctx, b, "n", "o", time.Second), fence.ErrInvalid)
	require.ErrorIs(t, release(ctx, b, "n", "o"), fence.ErrInvalid)
	_, err = inspect(ctx, b, "n")
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.ErrorIs(t, s.Put(ctx, "k", 1, nil), fence.ErrInvalid)
	require.ErrorIs(t, s.Delete(ctx, "k", 1), fence.ErrInvalid)
	require.ErrorIs(t, s.Advance(ctx, "k", 1), fence.ErrInvalid)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, fence.ErrInvalid)
}

// TestTTLNearMaxInt64 takes a lock for the longest TTL there is. Redis keeps
// it in milliseconds, which overflow a time.Duration when read back; Inspect
// and HeldError clamp instead of reporting a negative TTL.
func TestTTLNearMaxInt64(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	_, err := acquire(ctx, b, "job", newOwner(t), math.MaxInt64)
	require.NoError(t, err)
	info, err := inspect(ctx, b, "job")
	require.NoError(t, err)
	require.Greater(t, info.TTL, 290*365*24*time.Hour, "Inspect TTL %v", info.TTL)
	_, err = acquire(ctx, b, "job", newOwner(t), time.Second)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.Greater(t, held.TTL, 290*365*24*time.Hour, "HeldError TTL %v", held.TTL)
}

// A lease written before leases carried metadata (a hash with owner and
// token only, as an older version of this adapter leaves it during a rolling
// upgrade) is reported with empty metadata, not as an unexpected reply.
func TestInspectLeaseWithoutMetadata(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	o := newOwner(t)
	require.NoError(t, c.HSet(ctx, b.LeaseKey("old"), "owner", o, "token", "7").Err())
	require.NoError(t, c.PExpire(ctx, b.LeaseKey("old"), time.Minute).Err())
	info, err := b.Inspect(ctx, "old", driver.Exclusive)
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, driver.Info{Name: "old", Kind: driver.Exclusive, Holders: []driver.Holder{{Owner: o, Kind: driver.Exclusive, Token: 7, TTL: info.Holders[0].TTL}}}, info)
	// Its owner's next acquire keeps the token and adds the metadata.
	tok, err := acquireMD(ctx, b, "old", o, time.Minute, "host=b")
	require.NoError(t, err)
	require.Equal(t, fence.Token(7), tok)
	after, err := inspect(ctx, b, "old")
	require.NoError(t, err)
	require.Equal(t, "host=b", after.Metadata)
}

// TestMetadataMemoryUsage reports what the metadata field costs a lease
// hash, for docs/redis.md.
func TestMetadataMemoryUsage(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	var base int64
	for i, md := range []string{"", lock.DefaultMetadata(), strings.Repeat("m", driver.MaxMetadataLen)} {
		name := fmt.Sprintf("mem%d", len(md))
		_, err := acquireMD(ctx, b, name, newOwner(t), time.Minute, md)
		require.NoError(t, err)
		n, err := c.MemoryUsage(ctx, b.LeaseKey(name)).Result()
		require.NoError(t, err)
		require.Positive(t, n)
		t.Logf("lease hash with %4d bytes of metadata: %d bytes", len(md), n)
		if i == 0 {
			base = n
		}
		// Stored once, as given: no copy, no escaping that multiplies it.
		require.Less(t, n-base, int64(len(md)+len(md)/2+64), "metadata of %d bytes", len(md))
	}
}
