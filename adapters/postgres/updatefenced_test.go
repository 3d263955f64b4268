package postgres_test

import (
	"context"

	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// The version-column recipe on the caller's own table.
func TestUpdateFenced(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE "Accounts ""x""" ("Id" int PRIMARY KEY, "bal; ance" bigint NOT NULL, note text, "Fence" bigint);
		INSERT INTO "Accounts ""x""" VALUES (1, 100, NULL, NULL), (2, 0, NULL, NULL)`)
	require.NoError(t, err)
	row := func(id int) postgres.Row {
		return postgres.Row{Table: pgx.Identifier{`Accounts "x"`}, Key: postgres.Match{"Id": id}, FenceColumn: "Fence"}
	}
	read := func(id int) (bal int64, note *string, f *int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT "bal; ance", note, "Fence" FROM "Accounts ""x""" WHERE "Id" = $1`, id).Scan(&bal, &note, &f))
		return
	}

	// A NULL fence accepts any token.
	require.NoError(t, postgres.UpdateFenced(ctx, pool, row(1), 5, map[string]any{"bal; ance": 90, "note": "'; DROP TABLE x; --"}))
	bal, note, f := read(1)
	require.Equal(t, int64(90), bal)
	require.Equal(t, "'; DROP TABLE x; --", *note)
	require.Equal(t, int64(5), *f)

	// Equal token: accepted. Lower: refused with the current fence.
	require.NoError(t, postgres.UpdateFenced(ctx, pool, row(1), 5, map[string]any{"bal; ance": 80}))
	err = postgres.UpdateFenced(ctx, pool, row(1), 4, map[string]any{"bal; ance": 0})
	require.ErrorIs(t, err, fence.ErrStale)
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, fence.StaleError{Key: "Id=1", Token: 4, Fence: 5}, *se)
	bal, _, _ = read(1)
	require.Equal(t, int64(80), bal)

	// An empty set only raises the fence.
	require.NoError(t, postgres.UpdateFenced(ctx, pool, row(1), fence.MaxToken, nil))
	_, _, f = read(1)
	require.Equal(t, int64(fence.MaxToken), *f)

	// A missing row is not found, not stale.
	err = postgres.UpdateFenced(ctx, pool, row(3), 9, map[string]any{"note": "x"})
	require.ErrorIs(t, err, fence.ErrNotFound)
	require.NotErrorIs(t, err, fence.ErrStale)

	// Inside a transaction, two rows at once; the stale one makes the caller roll back.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, postgres.UpdateFenced(ctx, tx, row(2), 6, map[string]any{"bal; ance": 20}))
	require.ErrorIs(t, postgres.UpdateFenced(ctx, tx, row(1), 6, map[string]any{"bal; ance": 60}), fence.ErrStale)
	require.NoError(t, tx.Rollback(ctx))
	bal, _, f = read(2)
	require.Equal(t, int64(0), bal)
	require.Nil(t, f)

	// Bad input.
	for _, bad := range []struct {
		row postgres.Row
		tok fence.Token
		set map[string]any
	}{
		{row(1), 0, nil},
		{postgres.Row{Key: postgres.Match{"id": 1}}, 1, nil},
		{postgres.Row{Table: pgx.Identifier{"a", "b", "c"}, Key: postgres.Match{"id": 1}}, 1, nil},
		{postgres.Row{Table: pgx.Identifier{"t"}}, 1, nil},
		{postgres.Row{Table: pgx.Identifier{"t"}, Key: postgres.Match{"id": nil}}, 1, nil},
		{postgres.Row{Table: pgx.Identifier{"t"}, Key: postgres.Match{"fence": 1}}, 1, nil},
		{postgres.Row{Table: pgx.Identifier{"t"}, Key: postgres.Match{"id": 1}, Where: postgres.Match{"fence": 1}}, 1, nil},
		{postgres.Row{Table: pgx.Identifier{"t"}, Key: postgres.Match{"id": 1}, Where: postgres.Match{"a\x00": 1}}, 1, nil},
		{row(1), 1, map[string]any{"Fence": 1}},
		{row(1), 1, map[string]any{"Id": 1}},
		{row(1), 1, map[string]any{"": 1}},
		{row(1), 1, map[string]any{"a\x00b": 1}},
		{postgres.Row{Table: pgx.Identifier{"t"}, Key: postgres.Match{strings.Repeat("k", 64): 1}}, 1, nil},
	} {
		require.ErrorIs(t, postgres.UpdateFenced(ctx, pool, bad.row, bad.tok, bad.set), fence.ErrInvalid, "%+v", bad)
	}
	require.ErrorIs(t, postgres.UpdateFenced(ctx, nil, row(1), 1, nil), fence.ErrInvalid)
}

// A composite key updates exactly the row it names, and a Where condition
// that does not hold changes nothing and says so (ErrNoMatch), as a stale
// token does (ErrStale, which wins when both apply).
func TestUpdateFencedCompositeKeyAndWhere(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE invoices (tenant int, id int, status text, note text, fence bigint, PRIMARY KEY (tenant, id));
		INSERT INTO invoices VALUES (1, 7, 'pending', NULL, NULL), (2, 7, 'pending', NULL, NULL), (1, 8, NULL, NULL, 9)`)
	require.NoError(t, err)
	inv := func(tenant, id int, where postgres.Match) postgres.Row {
		return postgres.Row{Table: pgx.Identifier{"invoices"}, Key: postgres.Match{"tenant": tenant, "id": id}, Where: where}
	}
	status := func(tenant, id int) (s *string, f *int64) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, fence FROM invoices WHERE tenant = $1 AND id = $2`, tenant, id).Scan(&s, &f))
		return
	}
	pending := postgres.Match{"status": "pending"}

	require.NoError(t, postgres.UpdateFenced(ctx, pool, inv(1, 7, pending), 3, map[string]any{"status": "sent"}))
	s, f := status(1, 7)
	require.Equal(t, "sent", *s)
	require.Equal(t, int64(3), *f)
	s, f = status(2, 7)
	require.Equal(t, "pending", *s, "the other tenant's row must not change")
	require.Nil(t, f)

	// Already sent: the condition fails, even for a newer token.
	err = postgres.UpdateFenced(ctx, pool, inv(1, 7, pending), 4, map[string]any{"status": "sent", "note": "again"})
	require.ErrorIs(t, err, postgres.ErrNoMatch)
	require.NotErrorIs(t, err, fence.ErrStale)
	s, f = status(1, 7)
	require.Equal(t, "sent", *s)
	require.Equal(t, int64(3), *f, "a refused update must not raise the fence")

	// Stale and not matching: stale is reported.
	err = postgres.UpdateFenced(ctx, pool, inv(1, 7, pending), 2, map[string]any{"status": "sent"})
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, fence.StaleError{Key: "id=7, tenant=1", Token: 2, Fence: 3}, *se)

	// A nil value in Where is IS NULL; values are never SQL.
	require.NoError(t, postgres.UpdateFenced(ctx, pool, inv(1, 8, postgres.Match{"status": nil, "note": nil}), 9, map[string]any{"status": "x"}))
	require.ErrorIs(t, postgres.UpdateFenced(ctx, pool, inv(1, 8, postgres.Match{"status": "' OR true --"}), 9, map[string]any{"status": "y"}), postgres.ErrNoMatch)
	s, _ = status(1, 8)
	require.Equal(t, "x", *s)

	require.ErrorIs(t, postgres.UpdateFenced(ctx, pool, inv(3, 7, pending), 9, nil), fence.ErrNotFound)
}

// A Key that matches several rows is refused with ErrInvalid and changes
// none of them, even those whose fence the token could write: it never
// applies partially.
func TestUpdateFencedRefusesNonUniqueKey(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE orders (customer int, status text, fence bigint);
		INSERT INTO orders VALUES (1, 'a', 3), (1, 'b', 9), (2, 'c', NULL)`)
	require.NoError(t, err)
	row := postgres.Row{Table: pgx.Identifier{"orders"}, Key: postgres.Match{"customer": 1}}
	for _, tok := range []fence.Token{5, 10} {
		err = postgres.UpdateFenced(ctx, pool, row, tok, map[string]any{"status": "x"})
		require.ErrorIs(t, err, fence.ErrInvalid, "token %d", tok)
	}
	var changed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'x' OR fence IN (5, 10)`).Scan(&changed))
	require.Zero(t, changed, "a non-unique key applied partially")
	// A key that is unique in fact is fine.
	require.NoError(t, postgres.UpdateFenced(ctx, pool, postgres.Row{Table: pgx.Identifier{"orders"}, Key: postgres.Match{"customer": 2}}, 1, map[string]any{"status": "x"}))
}

// hookDB runs after once, right after the first statement sent through it.
type hookDB struct {
	postgres.DB
	after func()
}

func (h *hookDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := h.DB.Exec(ctx, sql, args...)
	if h.after != nil {
		h.after()
		h.after = nil
	}
	return tag, err
}

// The row is inserted by someone else between the update (which found
// nothing) and the lookup of its fence: the lookup sees a fence the token
// may write, so UpdateFenced tries again and succeeds, instead of reporting
// a StaleError whose fence is not above the token.
func TestUpdateFencedRetriesAfterConcurrentInsert(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE inv (id int PRIMARY KEY, status text, fence bigint)`)
	require.NoError(t, err)
	db := &hookDB{DB: pool, after: func() {
		_, err := pool.Exec(ctx, `INSERT INTO inv VALUES (1, 'pending', NULL)`)
		require.NoError(t, err)
	}}
	row := postgres.Row{Table: pgx.Identifier{"inv"}, Key: postgres.Match{"id": 1}, Where: postgres.Match{"status": "pending"}}
	require.NoError(t, postgres.UpdateFenced(ctx, db, row, 5, map[string]any{"status": "sent"}))
	var status string
	var f int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT status, fence FROM inv WHERE id = 1`).Scan(&status, &f))
	require.Equal(t, "sent", status)
	require.Equal(t, int64(5), f)
}

// The read-modify-write recipe, step by step in the order of the issue: A
// reads "pending" and stalls past its lease; B takes the lock with a
// higher token and reads "pending"; A's late update comes in, then B's.
// Each update sends the invoice (a row in sends) in the same transaction.
//
// Reading, then updating with UpdateFenced, as docs/postgres.md used to
// show, sends twice: A's late update is accepted, because the row's fence
// is still the old one. Raising the fence before the read (UpdateFenced
// with nothing to set), or a Where condition on the status, sends once.
func TestReadModifyWriteRecipes(t *testing.T) {
	pending := postgres.Match{"status": "pending"}
	for _, tc := range []struct {
		name       string
		raiseFirst bool
		where      postgres.Match
		wantSends  int
	}{
		{"read then write sends twice", false, nil, 2},
		{"raise first", true, nil, 1},
		{"raise first and Where", true, pending, 1},
		{"Where alone", false, pending, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			pool := testkit.Postgres(t)
			_, err := pool.Exec(ctx, `CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL, fence bigint);
				CREATE TABLE sends (invoice int NOT NULL, token bigint NOT NULL);
				INSERT INTO invoices VALUES (1, 'pending', NULL)`)
			require.NoError(t, err)
			row := postgres.Row{Table: pgx.Identifier{"invoices"}, Key: postgres.Match{"id": 1}, Where: tc.where}
			barrier := postgres.Row{Table: row.Table, Key: row.Key}
			readStatus := func(tok fence.Token) string {
				if tc.raiseFirst {
					require.NoError(t, postgres.UpdateFenced(ctx, pool, barrier, tok, nil), "raise the fence to %d", tok)
				}
				var status string
				require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM invoices WHERE id = 1`).Scan(&status))
				return status
			}
			send := func(tok fence.Token) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO sends VALUES (1, $1)`, int64(tok)); err != nil {
						return err
					}
					return postgres.UpdateFenced(ctx, tx, row, tok, map[string]any{"status": "sent"})
				})
			}
			const a, b fence.Token = 1, 2
			require.Equal(t, "pending", readStatus(a))
			require.Equal(t, "pending", readStatus(b))
			errA, errB := send(a), send(b)
			var sends int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM sends`).Scan(&sends))
			t.Logf("A's late update: %v; B's update: %v; sends: %d", errA, errB, sends)
			require.Equal(t, tc.wantSends, sends)
			if tc.wantSends == 1 {
				if tc.raiseFirst {
					require.ErrorIs(t, errA, fence.ErrStale)
					require.NoError(t, errB)
				} else {
					require.NoError(t, errA)
					require.ErrorIs(t, errB, postgres.ErrNoMatch)
				}
			}
		})
	}
}
