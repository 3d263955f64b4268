package sqldb_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// The shapes TxOf unwraps: GORM's PreparedStmtTX holds the
// *sql.Tx in an embedded interface field Tx, sqlx's Tx embeds *sql.Tx.
type (
	connPool interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}
	gormShaped  struct{ connPool }
	gormTx      struct{ Tx connPool }
	sqlxShaped  struct{ *sql.Tx }
	notTxShaped struct{ ConnPool connPool }
)

// TestTxOf: TxOf finds the *sql.Tx inside the wrappers of GORM (both
// modes) and sqlx, and refuses a *sql.DB, a pool outside a transaction and
// nil with fence.ErrInvalid.
func TestTxOf(t *testing.T) {
	var n atomic.Int64
	db := sql.OpenDB(counting{&n})
	defer db.Close()
	tx, err := db.Begin()
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	for _, x := range []any{tx, &gormTx{Tx: tx}, &sqlxShaped{tx}, &gormTx{Tx: connPool(tx)}} {
		got, err := sqldb.TxOf(x)
		require.NoError(t, err, "%T", x)
		require.True(t, got == tx, "%T", x)
	}
	for _, x := range []any{nil, db, (*sql.Tx)(nil), &gormTx{Tx: db}, &notTxShaped{ConnPool: tx}, &gormShaped{tx}, &sqlxShaped{}} {
		_, err := sqldb.TxOf(x)
		require.ErrorIs(t, err, fence.ErrInvalid, "%T", x)
	}
}
