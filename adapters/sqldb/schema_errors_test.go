package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
)

// everyCall runs each call that sends a statement on one table of opts,
// in dialect d, and returns the errors by call name.
func everyCall(ctx context.Context, t *testing.T, db *sql.DB, d sqldb.Dialect, opts *sqldb.Options) map[string]error {
	t.Helper()
	b := newDirect(db, d, opts)
	st := sqldb.NewStore(db, d, opts)
	owner := testkit.Owner(t)
	errs := map[string]error{}
	_, errs["Backend.Acquire"] = b.Acquire(ctx, "l", owner, time.Minute)
	errs["Backend.Extend"] = b.Extend(ctx, "l", owner, time.Minute)
	errs["Backend.Release"] = b.Release(ctx, "l", owner)
	_, errs["Backend.Inspect"] = b.Inspect(ctx, "l")
	errs["Store.Put"] = st.Put(ctx, "k", 1, []byte("v"))
	errs["Store.Delete"] = st.Delete(ctx, "k", 1)
	errs["Store.Advance"] = st.Advance(ctx, "k", 1)
	_, errs["Store.Get"] = st.Get(ctx, "k")
	inTx := func(f func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		return f(tx)
	}
	errs["Guard.Check"] = inTx(func(tx *sql.Tx) error { return sqldb.NewGuard(d, opts).Check(ctx, tx, "k", 1) })
	row := sqldb.Row{Table: opts.StoreTable, Key: sqldb.Match{"id": 1}}
	errs["UpdateFenced"] = inTx(func(tx *sql.Tx) error {
		return sqldb.UpdateFenced(ctx, tx, d, row, 1, map[string]any{"v": 1})
	})
	return errs
}

// TestMissingTableIsNotMigrated: every call on a table that does not
// exist (never migrated) fails with an error matching sqldb.ErrNotMigrated
// that names the table and what to do, and driver.Retryable rejects it.
func TestMissingTableIsNotMigrated(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t), pqServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			ns := testkit.Namespace(t)
			opts := &sqldb.Options{StoreTable: sqldb.Identifier{ns + "_nostore"}, LeaseTable: sqldb.Identifier{ns + "_noleases"}}
			for call, err := range everyCall(ctx, t, db, s.d, opts) {
				require.True(t, errors.Is(err, sqldb.ErrNotMigrated), "%s: %v; want ErrNotMigrated", call, err)
				require.False(t, driver.Retryable(err), "%s: %v is retryable", call, err)
				table := opts.LeaseTable[0]
				if strings.HasPrefix(call, "Store") || strings.HasPrefix(call, "Guard") || call == "UpdateFenced" {
					table = opts.StoreTable[0]
				}
				want := "sqldb.Migrate"
				if call == "UpdateFenced" {
					want = "ADD COLUMN"
				}
				require.True(t, strings.Contains(err.Error(), table) && strings.Contains(err.Error(), want),
					"%s: %q does not name %s and say %q", call, err, table, want)
			}
		})
	}
}

// TestWrongDialectIsInvalid: sqldb.PostgreSQL on a MariaDB connection, and
// sqldb.MySQL on PostgreSQL (pgx and lib/pq), are refused at the first
// call, by every call and by Migrate, with an error matching
// fence.ErrInvalid that names the right Dialect.
func TestWrongDialectIsInvalid(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t), pqServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			right, wrong := "sqldb.MySQL", sqldb.PostgreSQL
			if s.d == sqldb.PostgreSQL {
				right, wrong = "sqldb.PostgreSQL", sqldb.MySQL
			}
			// Tables that exist (migrated in the right dialect), so that
			// only the dialect is wrong.
			opts := tables(t, db, s.d)
			errs := everyCall(ctx, t, db, wrong, opts)
			errs["Migrate"] = sqldb.Migrate(ctx, db, wrong, &sqldb.Options{StoreTable: sqldb.Identifier{"x_store"}, LeaseTable: sqldb.Identifier{"x_leases"}})
			for call, err := range errs {
				require.True(t, errors.Is(err, fence.ErrInvalid), "%s: %v; want fence.ErrInvalid", call, err)
				require.True(t, strings.Contains(err.Error(), "use "+right), "%s: %q does not say to use %s", call, err, right)
				require.False(t, driver.Retryable(err), "%s: %v is retryable", call, err)
			}
		})
	}
}
