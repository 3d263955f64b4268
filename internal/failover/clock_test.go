package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/servers"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// startServer turns a servers error into a skip (no binaries) or a failure.
func startServer(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, servers.ErrNoBinary) {
		testkit.Unavailable(t, "server binaries", err.Error())
	}
	require.NoError(t, err)
}

// TestClockStepBackRedisMintsBelowEarlierTokenOnceCounterGone steps the
// clock of a redis-server back (testkit.ClockShift, an LD_PRELOAD shim:
// libfaketime 0.9.10 cannot run redis-server 7.0) by an hour and shows the exact
// window in which Redis mints a token below an earlier one:
//   - while the lock's counter exists, a step back changes nothing: the
//     next token is counter+1, above every earlier one;
//   - once the counter is gone (here its CounterIdle expiry; also a restart
//     without persistence or a failover that lost it), the token comes from
//     the stepped-back TIME and is below the tokens minted before the step,
//     until the clock has caught up with them (an hour here);
//   - the mitigation: a fenced store that is not the lock's Redis keeps the
//     highest token it saw and refuses the new holder's low token as stale
//     (the new holder learns it cannot write; the old holder cannot use the
//     lock to come back either, its lease is gone). With CounterIdle < 0
//     the counter never expires and only a loss of data opens the window.
func TestClockStepBackRedisMintsBelowEarlierTokenOnceCounterGone(t *testing.T) {
	ctx := testkit.Context(t)
	clock := testkit.NewClockShift(t)
	srv, err := servers.StartRedisEnv(clock.Env())
	startServer(t, err)
	t.Cleanup(srv.Close)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	prefix := testkit.Namespace(t)
	idle := 300 * time.Millisecond
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix, CounterIdle: idle})
	keep := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: prefix + "_keep", CounterIdle: -1})
	// The fenced resource is on a server with a true clock.
	store := fenceredis.NewStore(testkit.NewRedisServer(t).Client(t), &fenceredis.StoreOptions{Prefix: prefix})

	before := func(bk *fenceredis.Backend) fence.Token {
		o := testkit.Owner(t)
		tok := mustAcquire(t, ctx, bk, "job", o, time.Minute)
		require.NoError(t, release(ctx, bk, "job", o))
		return tok
	}
	tok1 := before(b)
	kept1 := before(keep)
	require.NoError(t, store.Put(ctx, "resource", tok1, []byte("before the step")))

	clock.Set(-time.Hour)
	serverNow, err := client.Time(ctx).Result()
	require.NoError(t, err)
	require.True(t, time.Since(serverNow) > 59*time.Minute, "the server clock did not step back: %v", serverNow)

	// Counter present: counter+1.
	owner2 := testkit.Owner(t)
	tok2 := mustAcquire(t, ctx, b, "job", owner2, time.Minute)
	require.Equal(t, tok1+1, tok2, "with the counter present the next token is counter+1")
	require.NoError(t, store.Put(ctx, "resource", tok2, []byte("counter+1")))
	require.NoError(t, release(ctx, b, "job", owner2))

	// Counter gone: wait for its idle expiry (on the server's clock, which
	// runs at normal speed after the step).
	err, _ = retry(ctx, 10*time.Second, func(c context.Context) error {
		n, err := client.Exists(c, b.CounterKey("job")).Result()
		if err == nil && n != 0 {
			return errNotYet
		}
		return err
	})
	require.NoError(t, err, "the counter did not expire")
	owner3 := testkit.Owner(t)
	tok3 := mustAcquire(t, ctx, b, "job", owner3, time.Minute)
	t.Logf("before the step %d; after, with the counter %d; after the counter expired %d (%.0f s below)",
		tok1, tok2, tok3, float64(tok1-tok3)/1e6)
	require.Less(t, tok3, tok1, "after a step back with the counter gone the token goes below earlier ones")

	// The separate store refuses the low token.
	require.ErrorIs(t, store.Put(ctx, "resource", tok3, []byte("low token")), fence.ErrStale)
	rec, err := store.Get(ctx, "resource")
	require.NoError(t, err)
	require.Equal(t, tok2, rec.Fence)

	// A counter that never expires carries the order across the step.
	kept2 := mustAcquire(t, ctx, keep, "job", testkit.Owner(t), time.Minute)
	require.Greater(t, kept2, kept1, "CounterIdle < 0: the token after the step")

}

// TestClockStepPostgresTokensIgnoreItExpiryFollowsIt runs PostgreSQL under
// libfaketime and steps its clock. Tokens come from the lease row's counter,
// so no step changes their order; leases expire by the database clock, so
// steps move expiry:
//   - an hour back: a live lease lasts an hour longer (the next owner waits,
//     a liveness cost), and the token after its release is the next one up;
//   - two hours ahead: a one-minute lease is expired at once, while its
//     holder still believes it holds it for a minute; the next owner gets a
//     higher token, and the fenced store refuses the first holder once the
//     next one wrote.
func TestClockStepPostgresTokensIgnoreItExpiryFollowsIt(t *testing.T) {
	ctx := testkit.Context(t)
	clock := testkit.NewFakeClock(t)
	pg, err := servers.StartPostgresEnv(clock.Env())
	startServer(t, err)
	t.Cleanup(pg.Close)
	p := openPG(t, pg.URL(), testkit.Namespace(t), true, nil)
	dbNow := func() time.Time {
		var now time.Time
		require.NoError(t, p.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now))
		return now
	}

	first := testkit.Owner(t)
	tok1 := mustAcquire(t, ctx, p.backend, "job", first, time.Minute)
	require.NoError(t, p.store.Put(ctx, "resource", tok1, []byte("first")))

	clock.Set("-3600")
	require.True(t, time.Until(dbNow()) < -59*time.Minute, "the database clock did not step back: %v", dbNow())
	info, err := inspect(ctx, p.backend, "job")
	require.NoError(t, err)
	require.True(t, info.TTL > time.Hour, "after a step back the lease lasts longer: TTL %v", info.TTL)
	_, err = acquire(ctx, p.backend, "job", testkit.Owner(t), time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, release(ctx, p.backend, "job", first))
	second := testkit.Owner(t)
	tok2 := mustAcquire(t, ctx, p.backend, "job", second, time.Minute)
	require.Equal(t, tok1+1, tok2, "the token after a step back")
	require.NoError(t, p.store.Put(ctx, "resource", tok2, []byte("second")))

	clock.Set("+3600")
	require.True(t, time.Until(dbNow()) > 59*time.Minute, "the database clock did not step ahead: %v", dbNow())
	third := testkit.Owner(t)
	tok3, err := acquire(ctx, p.backend, "job", third, time.Minute)
	require.NoError(t, err, "a step ahead expires the one-minute lease at once")
	require.Greater(t, tok3, tok2)
	require.NoError(t, p.store.Put(ctx, "resource", tok3, []byte("third")))
	require.ErrorIs(t, p.store.Put(ctx, "resource", tok2, []byte("second, still running")), fence.ErrStale)
}
