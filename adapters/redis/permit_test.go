package redis_test

import (
	"context"
	"errors"
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

// permitBackend is a Backend on the shared server under the test's own
// prefix, and the client under it.
func permitBackend(t *testing.T) (*fenceredis.Backend, *goredis.Client) {
	c := testkit.Redis(t)
	return fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)}), c
}

// requireHeld checks that err is a refusal: ErrHeld, as a *driver.HeldError.
func requireHeld(t *testing.T, err error, what string) *driver.HeldError {
	t.Helper()
	var he *driver.HeldError
	require.True(t, errors.As(err, &he), "%s: %v", what, err)
	require.ErrorIs(t, err, lock.ErrHeld, what)
	return he
}

// TestPermitRoundTrips: every permit operation is one script and one
// round trip (EVALSHA), whether it grants, extends, refuses, queues,
// releases with waiters to wake, leaves the line or inspects.
func TestPermitRoundTrips(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	c, rt := counted(t, shared.Options().Addr)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, shared)})
	a, other, w := newOwner(t), newOwner(t), newOwner(t)

	// Warm up: every script cached.
	_, err := acquirePermit(ctx, b, "warm", a, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	require.NoError(t, extendPermit(ctx, b, "warm", a, time.Minute))
	require.NoError(t, leavePermitLine(ctx, b, "warm", a))
	_, err = inspectPermits(ctx, b, "warm")
	require.NoError(t, err)
	rt.take()

	// The first refusal with a place while the Backend does not listen
	// subscribes (on a connection of its own), then asks again: two
	// scripts, once per Backend while it has waiters (and for 30 s after).
	_, err = acquirePermit(ctx, b, "warm", w, semaphore(1, time.Minute, time.Minute))
	requireHeld(t, err, "the first wait")
	_, sent := rt.take()
	require.Equal(t, "evalsha", sent[0], "first wait: %v", sent)
	require.Equal(t, "evalsha", sent[len(sent)-1], "first wait: %v", sent)
	scripts := 0
	for _, s := range sent {
		if s == "evalsha" {
			scripts++
		}
	}
	require.Equal(t, 2, scripts, "first wait: %v", sent)
	subs, err := shared.PubSubNumSub(ctx, b.WakeChannel()).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), subs[b.WakeChannel()], "subscribed to the wake-up channel")
	require.NoError(t, leavePermitLine(ctx, b, "warm", w))
	require.NoError(t, releasePermit(ctx, b, "warm", a))
	rt.take()

	ops := []struct {
		name string
		op   func() error
	}{
		{"Acquire permit (granted)", func() error { _, err := acquirePermit(ctx, b, "s", a, semaphore(1, time.Minute, 0)); return err }},
		{"Acquire permit (own permit)", func() error { _, err := acquirePermit(ctx, b, "s", a, semaphore(1, time.Minute, 0)); return err }},
		{"Acquire permit (refused)", func() error {
			_, err := acquirePermit(ctx, b, "s", other, semaphore(1, time.Minute, 0))
			requireHeld(t, err, "refused")
			return nil
		}},
		{"Acquire permit (queued)", func() error {
			_, err := acquirePermit(ctx, b, "s", w, semaphore(1, time.Minute, time.Minute))
			requireHeld(t, err, "queued")
			return nil
		}},
		{"Acquire permit (shape mismatch)", func() error {
			_, err := acquirePermit(ctx, b, "s", other, reader(time.Minute, 0))
			require.ErrorIs(t, err, lock.ErrShapeMismatch)
			return nil
		}},
		{"Extend permit", func() error { return extendPermit(ctx, b, "s", a, time.Minute) }},
		{"Inspect permits", func() error { _, err := inspectPermits(ctx, b, "s"); return err }},
		{"Release permit (a waiter to wake)", func() error { return releasePermit(ctx, b, "s", a) }},
		{"Leave line", func() error { return leavePermitLine(ctx, b, "s", w) }},
		{"Release permit (not held)", func() error {
			require.ErrorIs(t, releasePermit(ctx, b, "s", a), lock.ErrNotHeld)
			return nil
		}},
	}
	for _, op := range ops {
		require.NoError(t, op.op(), op.name)
		n, sent := rt.take()
		require.Equal(t, 1, n, "%s: round trips %v", op.name, sent)
		require.Equal(t, []string{"evalsha"}, sent, op.name)
	}
}

// TestPermitSemaphoreLimit: a semaphore of N grants N permits with rising
// tokens; the N+1-th is refused with the time until the earliest permit
// expires, and writes nothing; a release lets the next one in.
func TestPermitSemaphoreLimit(t *testing.T) {
	t.Parallel()
	b, _ := permitBackend(t)
	ctx := testCtx(t)
	const n = 3
	owners := make([]string, n)
	var last fence.Token
	for i := range owners {
		owners[i] = newOwner(t)
		p, err := acquirePermit(ctx, b, "sem", owners[i], semaphore(n, time.Minute, 0))
		require.NoError(t, err, "permit %d", i+1)
		require.Greater(t, p.Token, last, "permit %d's token", i+1)
		require.Zero(t, p.PriorWriter, "a semaphore has no writers")
		last = p.Token
	}
	extra := newOwner(t)
	_, err := acquirePermit(ctx, b, "sem", extra, semaphore(n, time.Minute, 0))
	he := requireHeld(t, err, "the N+1-th permit")
	require.Equal(t, n, he.Permits, "the refusal says the semaphore's %d permits are taken", n)
	require.Greater(t, he.TTL, 30*time.Second, "the time until the earliest permit expires")
	require.LessOrEqual(t, he.TTL, time.Minute)

	info, err := inspectPermits(ctx, b, "sem")
	require.NoError(t, err)
	require.Equal(t, driver.Semaphore, info.Kind)
	require.Equal(t, n, info.Limit)
	require.Len(t, info.Holders, n, "the refusal added nothing: %+v", info)
	require.Zero(t, info.Waiting, "a refusal without a place queues nothing")
	for _, h := range info.Holders {
		require.NotEqual(t, extra, h.Owner)
		require.Equal(t, driver.Semaphore, h.Kind)
	}

	require.NoError(t, releasePermit(ctx, b, "sem", owners[1]))
	p, err := acquirePermit(ctx, b, "sem", extra, semaphore(n, time.Minute, 0))
	require.NoError(t, err, "a permit after a release")
	require.Greater(t, p.Token, last)
}

// TestPermitSameOwnerRetry: an acquire retried by the holder extends its
// permit and returns the same token and prior writer; one of another kind
// is a shape mismatch that changes nothing.
func TestPermitSameOwnerRetry(t *testing.T) {
	t.Parallel()
	b, _ := permitBackend(t)
	ctx := testCtx(t)
	w1, r := newOwner(t), newOwner(t)
	first, err := acquirePermit(ctx, b, "rw", w1, writer(time.Minute, 0))
	require.NoError(t, err)
	require.NoError(t, releasePermit(ctx, b, "rw", w1))
	p, err := acquirePermit(ctx, b, "rw", r, reader(time.Second, 0))
	require.NoError(t, err)
	require.Equal(t, first.Token, p.PriorWriter)
	again, err := acquirePermit(ctx, b, "rw", r, reader(time.Minute, 0))
	require.NoError(t, err)
	require.Equal(t, p, again, "a retried acquire")
	info, err := inspectPermits(ctx, b, "rw")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Greater(t, info.Holders[0].TTL, 30*time.Second, "extended to the new TTL")

	_, err = acquirePermit(ctx, b, "rw", r, writer(time.Minute, 0))
	require.ErrorIs(t, err, lock.ErrShapeMismatch, "a reader asking to write")
	after, err := inspectPermits(ctx, b, "rw")
	require.NoError(t, err)
	require.Len(t, after.Holders, 1)
	require.Equal(t, driver.Read, after.Holders[0].Kind)
	require.Equal(t, p.Token, after.Holders[0].Token)
}

// TestPermitShapeMismatch: a live name keeps its shape: a semaphore of
// another limit, or a read-write lock of a semaphore, is refused and
// changes nothing; once the name is idle, any shape may take it.
func TestPermitShapeMismatch(t *testing.T) {
	t.Parallel()
	b, c := permitBackend(t)
	ctx := testCtx(t)
	a := newOwner(t)
	_, err := acquirePermit(ctx, b, "x", a, semaphore(2, time.Minute, 0))
	require.NoError(t, err)
	for what, req := range map[string]driver.Request{
		"semaphore of 3": semaphore(3, time.Minute, time.Minute),
		"reader":         reader(time.Minute, time.Minute),
		"writer":         writer(time.Minute, time.Minute),
	} {
		_, err := acquirePermit(ctx, b, "x", newOwner(t), req)
		require.ErrorIs(t, err, lock.ErrShapeMismatch, what)
		require.Contains(t, err.Error(), "a semaphore of 2 permits", what)
	}
	info, err := inspectPermits(ctx, b, "x")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Zero(t, info.Waiting, "a mismatch queues nothing")
	require.Zero(t, c.Exists(ctx, b.PermitKeys("x")[3:]...).Val(), "line keys after mismatches")

	require.NoError(t, releasePermit(ctx, b, "x", a))
	_, err = acquirePermit(ctx, b, "x", a, writer(time.Minute, 0))
	require.NoError(t, err, "an idle name takes a new shape")
	_, err = acquirePermit(ctx, b, "x", newOwner(t), semaphore(2, time.Minute, 0))
	require.ErrorIs(t, err, lock.ErrShapeMismatch)
	require.Contains(t, err.Error(), "a read-write lock")
}

// TestPermitReaderRefusedWhileWriterHolds: readers share, a writer excludes
// readers and writers, and every permit reports the newest writer before it.
func TestPermitReaderRefusedWhileWriterHolds(t *testing.T) {
	t.Parallel()
	b, _ := permitBackend(t)
	ctx := testCtx(t)
	w, r1, r2 := newOwner(t), newOwner(t), newOwner(t)
	wp, err := acquirePermit(ctx, b, "rw", w, writer(time.Minute, 0))
	require.NoError(t, err)
	require.Zero(t, wp.PriorWriter)
	_, err = acquirePermit(ctx, b, "rw", r1, reader(time.Minute, 0))
	requireHeld(t, err, "a reader while a writer holds")
	_, err = acquirePermit(ctx, b, "rw", r1, writer(time.Minute, 0))
	requireHeld(t, err, "a second writer")
	require.NoError(t, releasePermit(ctx, b, "rw", w))

	p1, err := acquirePermit(ctx, b, "rw", r1, reader(time.Minute, 0))
	require.NoError(t, err)
	p2, err := acquirePermit(ctx, b, "rw", r2, reader(time.Minute, 0))
	require.NoError(t, err, "readers share")
	require.Equal(t, wp.Token, p1.PriorWriter)
	require.Equal(t, wp.Token, p2.PriorWriter)
	require.Greater(t, p2.Token, p1.Token)
	_, err = acquirePermit(ctx, b, "rw", w, writer(time.Minute, 0))
	requireHeld(t, err, "a writer while readers hold")

	info, err := inspectPermits(ctx, b, "rw")
	require.NoError(t, err)
	require.Equal(t, driver.Write, info.Kind, "a read-write lock")
	require.Zero(t, info.Limit)
	require.Len(t, info.Holders, 2)
	require.Equal(t, wp.Token, info.LastWriter)
}

// TestPermitWriterNotStarved: a writer waiting in line blocks the readers
// that come after it, with or without a place of their own, so a stream of
// readers cannot starve it; the last reader's release wakes it, and its
// release wakes the readers behind it.
func TestPermitWriterNotStarved(t *testing.T) {
	t.Parallel()
	b, _ := permitBackend(t)
	ctx := testCtx(t)
	r1, w, r2, r3 := newOwner(t), newOwner(t), newOwner(t), newOwner(t)
	_, err := acquirePermit(ctx, b, "rw", r1, reader(time.Minute, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "rw", w, writer(time.Minute, time.Minute))
	requireHeld(t, err, "the writer, queued behind a reader")
	_, err = acquirePermit(ctx, b, "rw", r2, reader(time.Minute, 0))
	requireHeld(t, err, "a reader without a place, behind a waiting writer")
	_, err = acquirePermit(ctx, b, "rw", r3, reader(time.Minute, time.Minute))
	requireHeld(t, err, "a reader with a place, behind a waiting writer")
	_, err = acquirePermit(ctx, b, "rw", r3, reader(time.Minute, time.Minute))
	requireHeld(t, err, "the reader renewing its place")
	info, err := inspectPermits(ctx, b, "rw")
	require.NoError(t, err)
	require.Equal(t, 2, info.Waiting, "the writer and r3, each once")

	require.NoError(t, releasePermit(ctx, b, "rw", r1))
	woken(t, b, "rw", w)
	wp, err := acquirePermit(ctx, b, "rw", w, writer(time.Minute, time.Minute))
	require.NoError(t, err, "the writer, first in line, after the last reader left")
	_, err = acquirePermit(ctx, b, "rw", r3, reader(time.Minute, time.Minute))
	requireHeld(t, err, "r3 while the writer holds")
	require.NoError(t, releasePermit(ctx, b, "rw", w))
	woken(t, b, "rw", r3)
	p, err := acquirePermit(ctx, b, "rw", r3, reader(time.Minute, time.Minute))
	require.NoError(t, err)
	require.Equal(t, wp.Token, p.PriorWriter)
	info, err = inspectPermits(ctx, b, "rw")
	require.NoError(t, err)
	require.Zero(t, info.Waiting)
}

// woken waits for owner's wake-up on name, failing t if none comes within
// 5 s (its place is a minute, so no renewal is due: only a wake-up counts).
func woken(t *testing.T, b *fenceredis.Backend, name, owner string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, awaitPermit(ctx, b, name, owner, 10*time.Second), "%s not woken", owner)
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestPermitWakeAcrossBackends: a waiter in one process (Backend, client,
// channel) is woken by a release in another, and a wake-up sent before it
// calls Await is kept for it.
func TestPermitWakeAcrossBackends(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	ctx := testCtx(t)
	prefix := testkit.RedisPrefix(t, shared)
	newBackend := func() *fenceredis.Backend {
		c := goredis.NewClient(shared.Options())
		t.Cleanup(func() { _ = c.Close() })
		return fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})
	}
	hb, wb := newBackend(), newBackend()
	holder, waiter := newOwner(t), newOwner(t)
	_, err := acquirePermit(ctx, hb, "s", holder, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, wb, "s", waiter, semaphore(1, time.Minute, time.Minute))
	requireHeld(t, err, "queued")
	// Released the moment Acquire returned, before Await: the
	// first wait of a Backend subscribed before its answer, so the wake-up
	// is in the waiter's mailbox.
	require.NoError(t, releasePermit(ctx, hb, "s", holder))
	woken(t, wb, "s", waiter)
	_, err = acquirePermit(ctx, wb, "s", waiter, semaphore(1, time.Minute, time.Minute))
	require.NoError(t, err)
}

// TestPermitExpiryByServerTime: a permit's and a place's expiry are the
// server's TIME plus their TTL; an expired permit can be neither extended
// nor released and frees its slot; and an idle name keeps only its
// counter, which never expires.
func TestPermitExpiryByServerTime(t *testing.T) {
	t.Parallel()
	b, c := permitBackend(t)
	ctx := testCtx(t)
	a, q := newOwner(t), newOwner(t)
	keys := b.PermitKeys("s")
	serverMs := func() int64 {
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		return now.UnixMilli()
	}
	before := serverMs()
	_, err := acquirePermit(ctx, b, "s", a, semaphore(1, 200*time.Millisecond, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "s", q, semaphore(1, time.Minute, 150*time.Millisecond))
	requireHeld(t, err, "queued")
	after := serverMs()
	exp, err := c.ZScore(ctx, keys[2], a).Result()
	require.NoError(t, err)
	require.True(t, int64(exp) >= before+200 && int64(exp) <= after+201, "permit expiry %v not server time + 200 ms in [%d, %d]", exp, before+200, after+200)
	place, err := c.ZScore(ctx, keys[4], q).Result()
	require.NoError(t, err)
	require.True(t, int64(place) >= before+150 && int64(place) <= after+151, "place expiry %v", place)

	eventually(t, 5*time.Second, "every key but the counter expiring", func() bool {
		return c.Exists(ctx, keys[1:]...).Val() == 0
	})
	require.ErrorIs(t, extendPermit(ctx, b, "s", a, time.Minute), lock.ErrNotHeld, "extend after expiry")
	require.ErrorIs(t, releasePermit(ctx, b, "s", a), lock.ErrNotHeld, "release after expiry")
	require.Zero(t, c.Exists(ctx, keys[1:]...).Val(), "Extend permit re-created something")
	require.Equal(t, time.Duration(-1), c.PTTL(ctx, keys[0]).Val(), "the counter has no expiry")
	info, err := inspectPermits(ctx, b, "s")
	require.NoError(t, err)
	require.Zero(t, info.Kind, "an idle name has no shape")
	require.Empty(t, info.Holders)

	_, err = acquirePermit(ctx, b, "s", newOwner(t), reader(time.Minute, 0))
	require.NoError(t, err, "an idle name after expiry takes any shape")
}

// TestPermitIdleKeepsOnlyCounter: once its permits are released and its
// places left, a name has its counter key alone (last token and last
// writer), without expiry; a lock of the same name never touched it.
func TestPermitIdleKeepsOnlyCounter(t *testing.T) {
	t.Parallel()
	b, c := permitBackend(t)
	ctx := testCtx(t)
	w, r := newOwner(t), newOwner(t)
	wp, err := acquirePermit(ctx, b, "x", w, writer(time.Minute, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "x", r, reader(time.Minute, time.Minute))
	requireHeld(t, err, "queued")
	require.NoError(t, releasePermit(ctx, b, "x", w))
	rp, err := acquirePermit(ctx, b, "x", r, reader(time.Minute, time.Minute))
	require.NoError(t, err)
	require.NoError(t, releasePermit(ctx, b, "x", r))
	keys := b.PermitKeys("x")
	require.Zero(t, c.Exists(ctx, keys[1:]...).Val(), "permit keys left behind")
	counter, err := c.HGetAll(ctx, keys[0]).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"last": rp.Token.String(), "writer": wp.Token.String()}, counter)
	require.Equal(t, time.Duration(-1), c.PTTL(ctx, keys[0]).Val(), "the counter expires")
	require.Zero(t, c.Exists(ctx, b.LeaseKey("x"), b.CounterKey("x")).Val(), "a lock's keys")
}

// TestPermitApartFromLocks: a lock and a semaphore of one name neither see
// nor block each other, and their keys share one hash tag.
func TestPermitApartFromLocks(t *testing.T) {
	t.Parallel()
	b, _ := permitBackend(t)
	ctx := testCtx(t)
	a := newOwner(t)
	_, err := acquire(ctx, b, "x", a, time.Minute)
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "x", newOwner(t), writer(time.Minute, 0))
	require.NoError(t, err, "a write permit on a locked name")
	_, err = acquire(ctx, b, "y", newOwner(t), time.Minute)
	require.NoError(t, err)
	info, err := inspect(ctx, b, "x")
	require.NoError(t, err)
	require.Equal(t, a, info.Owner)
	require.ErrorIs(t, releasePermit(ctx, b, "x", a), lock.ErrNotHeld, "the lock's owner holds no permit")

	name := "a}{b%"
	want := "{" + strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(name) + "}"
	lockKeys := map[string]bool{b.LeaseKey(name): true, b.CounterKey(name): true, b.QueueKey(name): true, b.PlacesKey(name): true, b.QueuedKey(name): true}
	for _, k := range b.PermitKeys(name) {
		i := strings.IndexByte(k, '{')
		j := strings.IndexByte(k[i:], '}')
		require.Equal(t, want, k[i:i+j+1], "hash tag of %s", k)
		require.False(t, lockKeys[k], "%s is a lock's key", k)
	}
}

// TestPermitInvalidInputSendsNothing: bad input is ErrInvalid and never
// reaches the server; an ended context is its error, also unsent.
func TestPermitInvalidInputSendsNothing(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c, rt := counted(t, srv.Addr())
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	o := newOwner(t)
	client := lock.New(b, nil)
	tryPermit := func(name string, n int, ttl time.Duration) func() error {
		return func() error { _, err := client.Semaphore(name, n).TryAcquire(ctx, ttl); return err }
	}
	// The input a Client can send; it makes its own owners and kinds, and
	// its leases carry what it checked when it acquired.
	invalid := map[string]func() error{
		"empty name":      tryPermit("", 1, time.Second),
		"ttl 999µs":       tryPermit("n", 1, 999*time.Microsecond),
		"limit 0":         tryPermit("n", 0, time.Second),
		"limit above max": tryPermit("n", driver.MaxPermits+1, time.Second),
		"place 1ms": func() error {
			queued := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: time.Millisecond}})
			_, err := queued.RWLock("n").AcquireWrite(ctx, time.Second)
			return err
		},
		"Inspect empty name": func() error { _, err := client.Semaphore("", 1).Inspect(ctx); return err },
		"Inspect bad UTF-8":  func() error { _, err := client.RWLock("\xff").Inspect(ctx); return err },
	}
	for name, op := range invalid {
		require.ErrorIs(t, op(), fence.ErrInvalid, name)
		n, sent := rt.take()
		require.Zero(t, n, "%s sent %v", name, sent)
	}
	keys, err := srv.Client(t).Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "written by refused calls")
	permit, err := client.Semaphore("n", 1).TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	rt.take()
	require.ErrorIs(t, permit.Extend(ctx, 0), fence.ErrInvalid, "Extend ttl 0")
	n, sent := rt.take()
	require.Zero(t, n, "Extend ttl 0 sent %v", sent)

	done, cancel := context.WithCancel(ctx)
	cancel()
	ended := map[string]func() error{
		"Acquire permit":  func() error { _, err := acquirePermit(done, b, "n", o, writer(time.Second, 0)); return err },
		"Extend permit":   func() error { return extendPermit(done, b, "n", o, time.Second) },
		"Release permit":  func() error { return releasePermit(done, b, "n", o) },
		"Leave line":      func() error { return leavePermitLine(done, b, "n", o) },
		"Inspect permits": func() error { _, err := inspectPermits(done, b, "n"); return err },
		"Await permit":    func() error { return awaitPermit(done, b, "n", o, time.Minute) },
	}
	for name, op := range ended {
		require.ErrorIs(t, op(), context.Canceled, name)
		n, sent := rt.take()
		require.Zero(t, n, "%s with an ended context sent %v", name, sent)
	}
}

// TestPermitContextHonoured: a call to a server that does not answer (its
// process stopped) returns by the context's deadline, with the context's
// error, and a waiter's Await returns when its context ends.
func TestPermitContextHonoured(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()}) // default options
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	o := newOwner(t)
	_, err := acquirePermit(ctx, b, "s", o, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "s", newOwner(t), semaphore(1, time.Minute, time.Minute))
	requireHeld(t, err, "queued")

	waiter := newOwner(t)
	_, err = acquirePermit(ctx, b, "s", waiter, semaphore(1, time.Minute, time.Minute))
	requireHeld(t, err, "queued")
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	require.ErrorIs(t, awaitPermit(wctx, b, "s", waiter, time.Minute), context.DeadlineExceeded, "Await past its context")

	srv.Pause()
	t.Cleanup(srv.Resume)
	calls := map[string]func(context.Context) error{
		"Acquire permit": func(ctx context.Context) error {
			_, err := acquirePermit(ctx, b, "s", o, semaphore(1, time.Minute, 0))
			return err
		},
		"Extend permit":   func(ctx context.Context) error { return extendPermit(ctx, b, "s", o, time.Minute) },
		"Release permit":  func(ctx context.Context) error { return releasePermit(ctx, b, "s", o) },
		"Leave line":      func(ctx context.Context) error { return leavePermitLine(ctx, b, "s", waiter) },
		"Inspect permits": func(ctx context.Context) error { _, err := inspectPermits(ctx, b, "s"); return err },
	}
	for name, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		start := time.Now()
		err := call(cctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.True(t, driver.Retryable(err), "%s: a deadline is transient: %v", name, err)
		require.Less(t, time.Since(start), 3*time.Second, "%s returned late", name)
	}
}

// TestPermitDefaultOptions: a semaphore and a read-write lock over a
// go-redis client with its default options: grant, refuse, queue, wake,
// admit, inspect.
func TestPermitDefaultOptions(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	c := goredis.NewClient(&goredis.Options{Addr: shared.Options().Addr, DB: shared.Options().DB})
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, shared)})
	a, w := newOwner(t), newOwner(t)
	_, err := acquirePermit(ctx, b, "s", a, semaphore(1, time.Minute, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "s", w, semaphore(1, time.Minute, time.Minute))
	requireHeld(t, err, "queued")
	require.NoError(t, extendPermit(ctx, b, "s", a, time.Minute))
	require.NoError(t, releasePermit(ctx, b, "s", a))
	woken(t, b, "s", w)
	_, err = acquirePermit(ctx, b, "s", w, semaphore(1, time.Minute, time.Minute))
	require.NoError(t, err)
	info, err := inspectPermits(ctx, b, "s")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, w, info.Holders[0].Owner)
	require.NoError(t, releasePermit(ctx, b, "s", w))
}

// TestPermitReleaseWakesThoseLetIn: a writer's release wakes every reader
// in line ahead of the next writer, each in its own process; the release
// of the last reader then wakes that writer; a semaphore's release wakes
// as many waiters as permits are free.
func TestPermitReleaseWakesThoseLetIn(t *testing.T) {
	t.Parallel()
	shared := testkit.Redis(t)
	ctx := testCtx(t)
	prefix := testkit.RedisPrefix(t, shared)
	newBackend := func() *fenceredis.Backend {
		c := goredis.NewClient(shared.Options())
		t.Cleanup(func() { _ = c.Close() })
		return fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})
	}
	hb := newBackend()
	w1, w2 := newOwner(t), newOwner(t)
	_, err := acquirePermit(ctx, hb, "rw", w1, writer(time.Minute, 0))
	require.NoError(t, err)
	type waiter struct {
		b     *fenceredis.Backend
		owner string
		req   driver.Request
	}
	line := []waiter{
		{newBackend(), newOwner(t), reader(time.Minute, time.Minute)},
		{newBackend(), newOwner(t), reader(time.Minute, time.Minute)},
		{newBackend(), w2, writer(time.Minute, time.Minute)},
	}
	for _, w := range line {
		_, err := acquirePermit(ctx, w.b, "rw", w.owner, w.req)
		requireHeld(t, err, "queued")
	}
	require.NoError(t, releasePermit(ctx, hb, "rw", w1))
	for _, r := range line[:2] {
		woken(t, r.b, "rw", r.owner)
		_, err := acquirePermit(ctx, r.b, "rw", r.owner, r.req)
		require.NoError(t, err, "a reader let in by the writer's release")
	}
	require.NoError(t, releasePermit(ctx, line[0].b, "rw", line[0].owner))
	require.NoError(t, releasePermit(ctx, line[1].b, "rw", line[1].owner))
	woken(t, line[2].b, "rw", w2)
	_, err = acquirePermit(ctx, line[2].b, "rw", w2, line[2].req)
	require.NoError(t, err, "the writer after the readers")

	// A semaphore of 3, full, with two waiters: two releases free two
	// permits, and the waiters each get one.
	holders := []string{newOwner(t), newOwner(t), newOwner(t)}
	for _, h := range holders {
		_, err := acquirePermit(ctx, hb, "sem", h, semaphore(3, time.Minute, 0))
		require.NoError(t, err)
	}
	sem := []waiter{{newBackend(), newOwner(t), semaphore(3, time.Minute, time.Minute)}, {newBackend(), newOwner(t), semaphore(3, time.Minute, time.Minute)}}
	for _, w := range sem {
		_, err := acquirePermit(ctx, w.b, "sem", w.owner, w.req)
		requireHeld(t, err, "queued")
	}
	// The second release finds one permit free already (the first waiter
	// has not taken its own yet): it wakes both.
	require.NoError(t, releasePermit(ctx, hb, "sem", holders[0]))
	require.NoError(t, releasePermit(ctx, hb, "sem", holders[1]))
	for _, w := range sem {
		woken(t, w.b, "sem", w.owner)
		_, err := acquirePermit(ctx, w.b, "sem", w.owner, w.req)
		require.NoError(t, err)
	}
}
