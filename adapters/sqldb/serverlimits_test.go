package sqldb_test

import (
	"bytes"
	"context"

	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestMySQLRefusesWhatTheServerRefuses: table and column names ending in a
// tab, newline, CR, VT or FF, which MariaDB refuses (error 1103), are
// refused with fence.ErrInvalid before anything is sent, and a Migrate
// whose second table name is bad creates neither table.
func TestMySQLRefusesWhatTheServerRefuses(t *testing.T) {
	s := mysqlServer(t, "mysql", nil)
	ctx := testCtx(t)
	db := s.open(t, nil)
	ns := testkit.Namespace(t)
	for _, bad := range []string{"\t", "\n", "\r", "\v", "\f", " "} {
		name := ns + "_x" + bad
		// The server refuses it.
		_, err := db.ExecContext(ctx, "CREATE TABLE `"+name+"` (a INT)")
		require.Error(t, err, "the server took table name %q", name)

		good := sqldb.Identifier{ns + "_good"}
		opts := &sqldb.Options{StoreTable: good, LeaseTable: sqldb.Identifier{name}}
		require.ErrorIs(t, sqldb.Migrate(ctx, db, sqldb.MySQL, opts), fence.ErrInvalid, "Migrate with lease table %q", name)
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", good[0]).Scan(&n))
		require.Equal(t, 0, n, "Migrate created the store table before refusing the lease table %q", name)

		bopts := &sqldb.Options{StoreTable: sqldb.Identifier{name}}
		require.ErrorIs(t, sqldb.NewStore(db, sqldb.MySQL, bopts).Put(ctx, "k", 1, nil), fence.ErrInvalid)
		_, err = newDirect(db, sqldb.MySQL, opts).Acquire(ctx, "l", "o", time.Minute)
		require.ErrorIs(t, err, fence.ErrInvalid)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.ErrorIs(t, sqldb.NewGuard(sqldb.MySQL, bopts).Check(ctx, tx, "r", 1), fence.ErrInvalid)
		row := sqldb.Row{Table: sqldb.Identifier{"t"}, Key: sqldb.Match{"id" + bad: 1}}
		require.ErrorIs(t, sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 1, nil), fence.ErrInvalid)
		require.NoError(t, tx.Rollback())
	}
}

// TestPutOverMaxAllowedPacket: with interpolateParams=true, a value whose
// statement exceeds the server's max_allowed_packet is refused with
// ErrValueTooLarge (and fence.ErrInvalid), not retried, and not written,
// where the server would close the connection ("connection reset", which
// driver.Retryable retries); a value well under it is stored.
func TestPutOverMaxAllowedPacket(t *testing.T) {
	s := mysqlServer(t, "mysql-interpolate", func(c *mysql.Config) { c.InterpolateParams = true })
	ctx := testCtx(t)
	db := s.open(t, nil)
	opts := tables(t, db, sqldb.MySQL)
	st := sqldb.NewStore(db, sqldb.MySQL, opts)
	var limit int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&limit))

	require.NoError(t, st.Put(ctx, "small", 1, bytes.Repeat([]byte{'v'}, 64<<10)))
	err := putPromptly(t, ctx, st, "big", bytes.Repeat([]byte{'v'}, limit))
	require.ErrorIs(t, err, sqldb.ErrValueTooLarge)
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.False(t, driver.Retryable(err), "retryable: %v", err)
	_, err = st.Get(ctx, "big")
	require.ErrorIs(t, err, fence.ErrNotFound)
}

// putPromptly runs one Put under a deadline of its own.
func putPromptly(t *testing.T, ctx context.Context, st *sqldb.Store, key string, value []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := st.Put(ctx, key, 1, value)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put of %d bytes did not return: %v", len(value), err)
	}
	return err
}
