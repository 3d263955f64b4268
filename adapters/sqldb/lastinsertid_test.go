package sqldb_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestUpdateFencedKeepsLastInsertID: on MySQL, UpdateFenced (a barrier and
// an update) leaves the caller's LAST_INSERT_ID() as the caller's own
// INSERT set it.
func TestUpdateFencedKeepsLastInsertID(t *testing.T) {
	s := mysqlServer(t, "mysql", nil)
	ctx := testCtx(t)
	db := s.open(t, nil)
	_, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, status VARCHAR(8), fence BIGINT NULL)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO orders (status) VALUES ('a'), ('b'), ('c')")
	require.NoError(t, err)

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, "INSERT INTO orders (status) VALUES ('new')")
	require.NoError(t, err)
	id, err := res.LastInsertId()
	require.NoError(t, err)
	row := sqldb.Row{Table: sqldb.Identifier{"orders"}, Key: sqldb.Match{"id": 1}}
	require.NoError(t, sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 99, nil))
	require.NoError(t, sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 99, map[string]any{"status": "sent"}))
	var got int64
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&got))
	require.Equal(t, id, got, "LAST_INSERT_ID() after UpdateFenced")
	require.NoError(t, tx.Commit())
}
