package sqldb_test

import (
	"database/sql"
	"testing"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestUpdateFenced: the version-column recipe on the caller's own table,
// with quoted names, a composite key, a Where condition and a non-unique
// key, on both dialects.
func TestUpdateFenced(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			q := func(id string) string {
				if s.d == sqldb.MySQL {
					return "`" + id + "`"
				}
				return `"` + id + `"`
			}
			ph := func(n int) string {
				if s.d == sqldb.MySQL {
					return "?"
				}
				return "$" + string(rune('0'+n))
			}
			table := "Acc`ou\"nts"
			qt := q("Acc``ou\"nts")
			if s.d == sqldb.PostgreSQL {
				qt = `"Acc` + "`" + `ou""nts"`
			}
			for _, stmt := range []string{
				"CREATE TABLE " + qt + " (" + q("Id") + " INT, region VARCHAR(8), " + q("bal; ance") + " BIGINT NOT NULL, status VARCHAR(16), " + q("Fence") + " BIGINT, PRIMARY KEY (" + q("Id") + ", region))",
				"INSERT INTO " + qt + " VALUES (1, 'eu', 100, 'open', NULL), (2, 'eu', 0, 'open', NULL), (3, 'us', 0, 'open', NULL), (3, 'eu', 0, 'open', NULL)",
			} {
				_, err := db.ExecContext(ctx, stmt)
				require.NoError(t, err)
			}
			row := func(id int) sqldb.Row {
				return sqldb.Row{Table: sqldb.Identifier{table}, Key: sqldb.Match{"Id": id, "region": "eu"}, FenceColumn: "Fence"}
			}
			read := func(id int) (bal int64, f sql.NullInt64) {
				require.NoError(t, db.QueryRowContext(ctx, "SELECT "+q("bal; ance")+", "+q("Fence")+" FROM "+qt+" WHERE "+q("Id")+" = "+ph(1)+" AND region = 'eu'", id).Scan(&bal, &f))
				return
			}
			update := func(r sqldb.Row, tok fence.Token, set map[string]any) error {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				err = sqldb.UpdateFenced(ctx, tx, s.d, r, tok, set)
				if err != nil {
					require.NoError(t, tx.Rollback())
					return err
				}
				require.NoError(t, tx.Commit())
				return nil
			}

			// A NULL fence accepts any token; values are parameters.
			require.NoError(t, update(row(1), 5, map[string]any{"bal; ance": 90, "status": "'; DROP"}))
			bal, f := read(1)
			require.Equal(t, int64(90), bal)
			require.Equal(t, int64(5), f.Int64)
			// Equal token: accepted. Lower: refused with the current fence.
			require.NoError(t, update(row(1), 5, map[string]any{"bal; ance": 80}))
			err := update(row(1), 4, map[string]any{"bal; ance": 0})
			var se *fence.StaleError
			require.ErrorAs(t, err, &se)
			require.Equal(t, fence.Token(5), se.Fence)
			bal, _ = read(1)
			require.Equal(t, int64(80), bal)
			// An empty set only raises the fence.
			require.NoError(t, update(row(1), fence.MaxToken, nil))
			_, f = read(1)
			require.Equal(t, int64(fence.MaxToken), f.Int64)
			// Missing row, unmet Where, non-unique key.
			require.ErrorIs(t, update(row(9), 9, map[string]any{"status": "x"}), fence.ErrNotFound)
			w := row(2)
			w.Where = sqldb.Match{"status": "closed"}
			err = update(w, 9, map[string]any{"status": "done"})
			require.ErrorIs(t, err, sqldb.ErrNoMatch)
			require.NotErrorIs(t, err, fence.ErrStale)
			w.Where = sqldb.Match{"status": "open"}
			require.NoError(t, update(w, 9, map[string]any{"status": "done"}))
			dup := sqldb.Row{Table: sqldb.Identifier{table}, Key: sqldb.Match{"Id": 3}, FenceColumn: "Fence"}
			require.ErrorIs(t, update(dup, 9, map[string]any{"bal; ance": 1}), fence.ErrInvalid)
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+qt+" WHERE "+q("bal; ance")+" = 1").Scan(&n))
			require.Equal(t, 0, n)
		})
	}
}
