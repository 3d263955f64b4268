package sqldb_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestSharedLeaseTableWithPostgres shares one lease table between
// sqldb's PostgreSQL Backend and adapters/postgres: a row swept by
// postgres.Backend.Sweep, a bump (postgres.Admin.Bump, what fencectl bump
// runs) and a restore that lost rows and the floor are all followed by
// sqldb tokens above every token issued before for that name.
func TestSharedLeaseTableWithPostgres(t *testing.T) {
	ctx := testCtx(t)
	dsn := pgSchema(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	opts := tables(t, db, sqldb.PostgreSQL)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	popts := &postgres.Options{StoreTable: []string(opts.StoreTable), LeaseTable: []string(opts.LeaseTable)}
	sb := sqldb.NewBackend(db, sqldb.PostgreSQL, opts)
	pb := postgres.NewBackend(pool, popts)
	admin := postgres.NewAdmin(pool, popts)

	issued := map[string]fence.Token{}
	take := func(name string) fence.Token {
		t.Helper()
		owner := testkit.Owner(t)
		tok, err := sb.Acquire(ctx, name, owner, time.Minute)
		require.NoError(t, err)
		require.True(t, tok > issued[name], "%s: sqldb minted %d after %d had been issued", name, tok, issued[name])
		issued[name] = tok
		require.NoError(t, sb.Release(ctx, name, owner))
		return tok
	}
	for range 3 {
		take("a")
	}

	// Sweep deletes a's row and keeps its token in the floor row.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := pb.Sweep(ctx, time.Microsecond)
		require.NoError(t, err)
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "Sweep deleted nothing")
	}
	take("a")

	// A bump raises every row and the floor.
	_, err = admin.Bump(ctx, 1000)
	require.NoError(t, err)
	take("a")
	take("b")

	// A restore to a point before b's row and the floor existed, then the
	// bump the runbook prescribes: by more than any name's tokens rose
	// since that point (a's rose by 1005).
	_, err = db.ExecContext(ctx, `DELETE FROM `+pgIdent(opts.LeaseTable)+` WHERE name IN ('', 'b')`)
	require.NoError(t, err)
	_, err = admin.Bump(ctx, 100000)
	require.NoError(t, err)
	take("a")
	take("b")
}

// pgIdent quotes a one-part test table name.
func pgIdent(id sqldb.Identifier) string { return `"` + id[0] + `"` }
