package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestMissingTableIsNotMigrated: every call on a table that was never
// migrated (Backend, Admin, Store, Guard, UpdateFenced) fails with an error
// matching postgres.ErrNotMigrated that names the table and what to do;
// driver.Retryable rejects it, and the server's error stays reachable.
func TestMissingTableIsNotMigrated(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	ns := testkit.Namespace(t)
	opts := &postgres.Options{StoreTable: pgx.Identifier{ns + "_nostore"}, LeaseTable: pgx.Identifier{ns + "_noleases"}}
	b := newCalls(pool, opts)
	admin := postgres.NewAdmin(pool, opts)
	st := postgres.NewStore(pool, opts)
	owner := newOwner(t)
	errs := map[string]error{}
	_, errs["Backend.Acquire"] = b.acquire(ctx, "l", owner, time.Minute)
	errs["Backend.Extend"] = b.extend(ctx, "l", owner, time.Minute)
	errs["Backend.Release"] = b.release(ctx, "l", owner)
	_, errs["Backend.Inspect"] = b.inspect(ctx, "l")
	_, errs["Backend.Sweep"] = b.Sweep(ctx, time.Second)
	_, errs["Admin.List"] = admin.List(ctx, "")
	_, errs["Admin.Bump"] = admin.Bump(ctx, 10)
	errs["Store.Put"] = st.Put(ctx, "k", 1, []byte("v"))
	errs["Store.Delete"] = st.Delete(ctx, "k", 1)
	errs["Store.Advance"] = st.Advance(ctx, "k", 1)
	_, errs["Store.Get"] = st.Get(ctx, "k")
	errs["Guard.Check"] = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return postgres.NewGuard(opts).Check(ctx, tx, "k", 1)
	})
	errs["UpdateFenced"] = postgres.UpdateFenced(ctx, pool, postgres.Row{Table: opts.StoreTable, Key: postgres.Match{"id": 1}}, 1, map[string]any{"v": 1})
	for call, err := range errs {
		require.True(t, errors.Is(err, postgres.ErrNotMigrated), "%s: %v; want ErrNotMigrated", call, err)
		require.False(t, driver.Retryable(err), "%s: %v is retryable", call, err)
		requireSQLState(t, err, "42P01")
		table, want := opts.LeaseTable[0], "postgres.Migrate"
		switch {
		case call == "UpdateFenced":
			table, want = opts.StoreTable[0], "ADD COLUMN"
		case strings.HasPrefix(call, "Store"), strings.HasPrefix(call, "Guard"):
			table = opts.StoreTable[0]
		}
		require.True(t, strings.Contains(err.Error(), table) && strings.Contains(err.Error(), want),
			"%s: %q does not name %s and say %q", call, err, table, want)
	}
}
