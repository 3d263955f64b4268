package sqldb_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestGuardNamedLockTimeoutIsConflict: on MySQL a Check that waits for the
// resource's named lock (another transaction holds it while it waits for
// the row) longer than its session's innodb_lock_wait_timeout gets
// ErrConflict, not a stale refusal, and the named lock is free again once
// the transactions end.
func TestGuardNamedLockTimeoutIsConflict(t *testing.T) {
	ctx := testCtx(t)
	db := testkit.MySQL(t)
	g := sqldb.NewGuard(sqldb.MySQL, tables(t, db, sqldb.MySQL))
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer holder.Rollback() //nolint:errcheck
	require.NoError(t, g.Check(ctx, holder, "r", 5))

	// The first waiter holds the named lock while it waits for the row.
	first := make(chan error, 1)
	firstTx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer firstTx.Rollback() //nolint:errcheck
	var firstID int64
	require.NoError(t, firstTx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&firstID))
	go func() { first <- g.Check(ctx, firstTx, "r", 6) }()
	awaitLockWaits(t, ctx, db, sqldb.MySQL, session{tx: firstTx, id: firstID})

	second, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer second.Rollback() //nolint:errcheck
	_, err = second.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1")
	require.NoError(t, err)
	err = g.Check(ctx, second, "r", 6)
	require.ErrorIs(t, err, sqldb.ErrConflict)
	require.NotErrorIs(t, err, fence.ErrStale)
	require.True(t, strings.Contains(err.Error(), "GET_LOCK"), "%v", err)

	require.NoError(t, holder.Rollback())
	require.NoError(t, <-first)
	require.NoError(t, firstTx.Commit())
	require.NoError(t, second.Rollback())
	// Nothing is left locked: a new transaction gets through at once.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, g.Check(ctx, tx, "r", 6))
	require.NoError(t, tx.Commit())
}

// TestGuardCheckKeepsLastInsertID: on MySQL a Check that applies, on a new
// resource or an existing one, leaves the caller's LAST_INSERT_ID() as the
// caller's own INSERT set it.
func TestGuardCheckKeepsLastInsertID(t *testing.T) {
	ctx := testCtx(t)
	db := testkit.MySQL(t)
	g := sqldb.NewGuard(sqldb.MySQL, tables(t, db, sqldb.MySQL))
	_, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(8))")
	require.NoError(t, err)
	for _, resource := range []string{"new", "new"} { // created, then existing
		func() {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback() //nolint:errcheck
			id := insertOrder(t, ctx, tx)
			require.NoError(t, g.Check(ctx, tx, resource, 3))
			var got int64
			require.NoError(t, tx.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&got))
			require.Equal(t, id, got, "LAST_INSERT_ID() after Guard.Check")
			require.NoError(t, tx.Commit())
		}()
	}
}

// insertOrder inserts a row into orders inside tx and returns its id.
func insertOrder(t *testing.T, ctx context.Context, tx *sql.Tx) int64 {
	t.Helper()
	res, err := tx.ExecContext(ctx, "INSERT INTO orders (status) VALUES ('new')")
	require.NoError(t, err)
	id, err := res.LastInsertId()
	require.NoError(t, err)
	return id
}

// TestGuardCheckTwiceInOneTransaction: on MySQL a transaction that checks
// a resource again, while another transaction waits for that resource's
// row (holding its named lock), gets through at once, and the waiter
// follows once it commits: for a resource created by the first Check and
// for one that existed.
func TestGuardCheckTwiceInOneTransaction(t *testing.T) {
	ctx := testCtx(t)
	db := testkit.MySQL(t)
	g := sqldb.NewGuard(sqldb.MySQL, tables(t, db, sqldb.MySQL))
	for _, resource := range []string{"twice", "twice"} { // created, then existing
		holder := begin(t, ctx, db, sqldb.MySQL, nil)
		require.NoError(t, g.Check(ctx, holder.tx, resource, 5))
		waiter := begin(t, ctx, db, sqldb.MySQL, nil)
		done := make(chan error, 1)
		go func() { done <- g.Check(ctx, waiter.tx, resource, 5) }()
		awaitLockWaits(t, ctx, db, sqldb.MySQL, waiter)

		again, cancel := context.WithTimeout(ctx, 5*time.Second)
		require.NoError(t, g.Check(again, holder.tx, resource, 5), "the second Check in the holder's transaction")
		cancel()
		require.NoError(t, holder.tx.Commit())
		require.NoError(t, <-done)
		require.NoError(t, waiter.tx.Commit())
	}
}
