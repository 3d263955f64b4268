package failover

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// pgSide is a pool, backend and store on one server, in schema.
type pgSide struct {
	pool    *pgxpool.Pool
	backend *postgres.Backend
	store   *postgres.Store
}

// openPG opens a pool on url with search_path schema and pgx's default
// options, plus the given runtime parameters; with create it creates the
// schema and fencekit's tables first.
func openPG(t *testing.T, url, schema string, create bool, params map[string]string) pgSide {
	t.Helper()
	ctx := testkit.Context(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	if create {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		_ = conn.Close(ctx)
		require.NoError(t, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	if create {
		require.NoError(t, postgres.Migrate(ctx, pool, nil))
	}
	return pgSide{pool: pool, backend: postgres.NewBackend(pool, nil), store: postgres.NewStore(pool, nil)}
}

// TestStandbyPromotionSynchronousKeepsLeaseAndFences runs a primary whose
// commits wait for a streaming standby (synchronous_standby_names = '*',
// synchronous_commit = on in the client's sessions), takes a lease and
// writes under it, kills the primary (SIGKILL) and promotes the standby
// (pg_promote). On the promoted standby the lease has its owner and token,
// another owner is refused, the fence is where the holder left it, and the
// next token is above it: nothing acknowledged was lost.
func TestStandbyPromotionSynchronousKeepsLeaseAndFences(t *testing.T) {
	ctx := testkit.Context(t)
	primary := testkit.NewPostgresServer(t)
	standby := testkit.NewPostgresStandby(t, primary)
	primary.SetSynchronousStandby("*")
	schema := testkit.Namespace(t)
	sync := map[string]string{"synchronous_commit": "on"}
	p := openPG(t, primary.URL(), schema, true, sync)

	holder := testkit.Owner(t)
	tok := mustAcquire(t, ctx, p.backend, "job", holder, time.Minute)
	require.NoError(t, p.store.Put(ctx, "resource", tok, []byte("written")))
	require.NoError(t, p.store.Advance(ctx, "barrier", tok))

	// Synchronous means no acknowledgement without the standby: with the
	// standby down, a write does not return OK. (PostgreSQL keeps such a
	// commit locally when the wait is cancelled; the caller sees an error,
	// an unknown outcome, never a success.)
	standby.Stop()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	err := p.store.Put(wctx, "unacknowledged", tok, []byte("x"))
	cancel()
	require.Error(t, err, "a write acknowledged while the synchronous standby was down")
	t.Logf("write with the standby down: %v", err)
	standby.Start()
	primary.SetSynchronousStandby("*") // waits until it streams in sync again

	primary.Kill()
	start := time.Now()
	standby.Promote()
	t.Logf("standby promoted in %v", time.Since(start))

	s := openPG(t, standby.URL(), schema, false, sync)
	var info lockInfo
	info, err = inspect(ctx, s.backend, "job")
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == holder && info.Token == tok,
		"lease on the promoted standby: %+v, want owner %s token %d", info, holder, tok)
	_, err = acquire(ctx, s.backend, "job", testkit.Owner(t), time.Second)
	require.ErrorIs(t, err, lock.ErrHeld)
	rec, err := s.store.Get(ctx, "resource")
	require.NoError(t, err)
	require.Equal(t, tok, rec.Fence)
	require.Equal(t, "written", string(rec.Value))
	rec, err = s.store.Get(ctx, "barrier")
	require.True(t, err == nil || errorsIsNotFound(err), "barrier: %v", err)
	require.Equal(t, tok, rec.Fence, "the barrier's fence")

	require.NoError(t, release(ctx, s.backend, "job", holder))
	next := mustAcquire(t, ctx, s.backend, "job", testkit.Owner(t), time.Minute)
	require.Greater(t, next, tok, "the first token after the promotion")
	require.NoError(t, s.store.Put(ctx, "resource", next, []byte("after")))
	require.ErrorIs(t, s.store.Put(ctx, "resource", tok, []byte("stale")), fence.ErrStale)
}

// TestStandbyPromotionAsynchronousLosesRecentLeasesAndFences shows what
// asynchronous replication loses. The standby stops receiving (here: it is
// stopped, as a lagging or cut-off standby would be); on the primary the
// first holder releases, a second holder acquires token N+1 and writes with
// it, and every one of those commits is acknowledged. The primary dies and
// the lagging standby is promoted. On it:
//   - the release, the second lease and the second holder's write are gone:
//     the first holder's lease is back, the fence is back at N, the value
//     is the first holder's;
//   - after the first holder releases, the next acquisition mints N+1
//     again: a token that was already handed to the second holder;
//   - the second holder, still running with N+1, has its write accepted by
//     the promoted store, next to the new holder of the same token.
//
// Everything committed after the standby's last replayed WAL position is
// lost: leases, released leases (they come back), tokens (they are minted
// again) and fences (they go back). Fencing cannot help across that loss,
// because the fence went back with the token.
func TestStandbyPromotionAsynchronousLosesRecentLeasesAndFences(t *testing.T) {
	ctx := testkit.Context(t)
	primary := testkit.NewPostgresServer(t)
	standby := testkit.NewPostgresStandby(t, primary)
	schema := testkit.Namespace(t)
	p := openPG(t, primary.URL(), schema, true, nil)

	first := testkit.Owner(t)
	tok := mustAcquire(t, ctx, p.backend, "job", first, time.Minute)
	require.NoError(t, p.store.Put(ctx, "resource", tok, []byte("first")))
	primary.WaitStandbyCaughtUp(standby)

	standby.Stop() // from here on, nothing reaches it
	require.NoError(t, release(ctx, p.backend, "job", first))
	second := testkit.Owner(t)
	lostTok := mustAcquire(t, ctx, p.backend, "job", second, time.Minute)
	require.Equal(t, tok+1, lostTok)
	require.NoError(t, p.store.Put(ctx, "resource", lostTok, []byte("second")))

	primary.Kill()
	standby.Start()
	standby.Promote()

	s := openPG(t, standby.URL(), schema, false, nil)
	info, err := inspect(ctx, s.backend, "job")
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == first && info.Token == tok,
		"the released lease is back: %+v, want owner %s token %d", info, first, tok)
	rec, err := s.store.Get(ctx, "resource")
	require.NoError(t, err)
	require.Equal(t, tok, rec.Fence, "the fence went back")
	require.Equal(t, "first", string(rec.Value), "the second holder's acknowledged write is lost")

	require.NoError(t, release(ctx, s.backend, "job", first))
	third := testkit.Owner(t)
	again := mustAcquire(t, ctx, s.backend, "job", third, time.Minute)
	require.Equal(t, lostTok, again, "the token handed to the second holder is minted again")
	require.NoError(t, s.store.Put(ctx, "resource", lostTok, []byte("second, still running")),
		"the second holder's write with its token is accepted next to the third holder's lease")
	t.Logf("token %d was issued to two holders: %s before the failover, %s after", lostTok, second[:8], third[:8])
}
