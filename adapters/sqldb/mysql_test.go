package sqldb_test

import (
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestKeysByteExact: keys and lock names differing only in case, a
// trailing space or Unicode normalization form are distinct; a key of
// fence.MaxKeyLen bytes is stored and found, and one byte more is refused
// before anything is sent.
func TestKeysByteExact(t *testing.T) {
	for _, s := range servers(t)[:3:3] {
		if s.name == "mysql-foundrows" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			st := sqldb.NewStore(db, s.d, opts)
			long := strings.Repeat("é", fence.MaxKeyLen/2) // 1024 bytes
			longToo := long[:fence.MaxKeyLen-2] + "è"
			keys := []string{"Key", "key", "KEY", "a", "a ", "a  ", "\u00e9", "e\u0301", "ß", "ss", long, longToo}
			for i, k := range keys {
				require.NoError(t, st.Put(ctx, k, fence.Token(i+1), []byte(k)))
			}
			for i, k := range keys {
				rec, err := st.Get(ctx, k)
				require.NoError(t, err)
				require.Equal(t, k, string(rec.Value))
				require.Equal(t, fence.Token(i+1), rec.Fence)
			}
			require.ErrorIs(t, st.Put(ctx, long+"x", 1, nil), fence.ErrInvalid)
			if s.d == sqldb.MySQL {
				// What a VARCHAR key under the usual collations would have
				// made of them: one key each.
				var c1, c2, c3, c4 bool
				require.NoError(t, db.QueryRowContext(ctx, "SELECT 'Key' = 'key' COLLATE utf8mb4_general_ci, "+
					"'a' = 'a ' COLLATE utf8mb4_general_ci, 'ß' = 's' COLLATE utf8mb4_general_ci, "+
					"'ß' = 'ss' COLLATE utf8mb4_unicode_ci").Scan(&c1, &c2, &c3, &c4))
				require.True(t, c1 && c2 && c3 && c4, "collations: %v %v %v %v", c1, c2, c3, c4)
			}

			b := newDirect(db, s.d, opts)
			owner := testkit.Owner(t)
			// Distinct names are distinct rows: each gets a new row's
			// first token (the floor row's plus one).
			var first fence.Token
			for i, name := range []string{"Lock", "lock", "lock ", long} {
				tok, err := b.Acquire(ctx, name, owner, time.Minute)
				require.NoError(t, err)
				if i == 0 {
					first = tok
				}
				require.Equal(t, first, tok, "name %q", name)
			}
		})
	}
}

// TestEqualWriteIsNotStale: writes that change nothing (the same token and
// value again) succeed under both affected-rows settings, on one
// connection, so that a refusal's LAST_INSERT_ID cannot leak into the next
// statement's outcome either.
func TestEqualWriteIsNotStale(t *testing.T) {
	for _, foundRows := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "clientFoundRows"}[foundRows], func(t *testing.T) {
			ctx := testCtx(t)
			cfg := testkit.MySQLConfig(t)
			cfg.ClientFoundRows = foundRows
			db := testkit.OpenMySQL(t, cfg)
			db.SetMaxOpenConns(1)
			opts := tables(t, db, sqldb.MySQL)
			st := sqldb.NewStore(db, sqldb.MySQL, opts)
			require.NoError(t, st.Put(ctx, "k", 5, []byte("v")))
			require.NoError(t, st.Put(ctx, "k", 5, []byte("v")))
			require.ErrorIs(t, st.Put(ctx, "k", 4, []byte("v")), fence.ErrStale)
			require.NoError(t, st.Advance(ctx, "k", 5)) // after a refusal on the same connection
			require.NoError(t, st.Delete(ctx, "k", 5))
			require.NoError(t, st.Delete(ctx, "k", 5))
			var se *fence.StaleError
			require.ErrorAs(t, st.Advance(ctx, "k", 3), &se)
			require.Equal(t, fence.StaleError{Key: "k", Token: 3, Fence: 5}, *se)

			b := newDirect(db, sqldb.MySQL, opts)
			owner := testkit.Owner(t)
			tok, err := b.Acquire(ctx, "l", owner, time.Hour)
			require.NoError(t, err)
			_, err = b.Acquire(ctx, "l", testkit.Owner(t), time.Hour)
			require.ErrorIs(t, err, lock.ErrHeld)
			again, err := b.Acquire(ctx, "l", owner, time.Hour) // same owner after a refusal
			require.NoError(t, err)
			require.Equal(t, tok, again)
			require.NoError(t, b.Extend(ctx, "l", owner, time.Hour))
			require.NoError(t, b.Extend(ctx, "l", owner, time.Hour))
			require.NoError(t, b.Release(ctx, "l", owner))
			require.ErrorIs(t, b.Release(ctx, "l", owner), lock.ErrNotHeld)
			require.ErrorIs(t, b.Extend(ctx, "l", owner, time.Hour), lock.ErrNotHeld)

			// UpdateFenced that sets what the row holds already.
			_, err = db.ExecContext(ctx, "CREATE TABLE acct (id INT PRIMARY KEY, bal INT, fence BIGINT)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO acct VALUES (1, 10, 7)")
			require.NoError(t, err)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			row := sqldb.Row{Table: sqldb.Identifier{"acct"}, Key: sqldb.Match{"id": 1}}
			require.NoError(t, sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 7, map[string]any{"bal": 10}))
			require.ErrorIs(t, sqldb.UpdateFenced(ctx, tx, sqldb.MySQL, row, 6, map[string]any{"bal": 10}), fence.ErrStale)
			require.NoError(t, tx.Commit())
		})
	}
}

// TestGuardDeadlockIsConflict: two transactions that Check two resources
// in opposite orders deadlock; the server's victim gets an error matching
// ErrConflict (MySQL error 1213, PostgreSQL 40P01), never success, and
// once it is rolled back the other transaction's Check succeeds. On MySQL
// it also shows why a transaction must not carry on after ErrConflict: the
// server has already rolled the victim back, and a statement it runs next
// commits on its own, outside any transaction.
func TestGuardDeadlockIsConflict(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			g := sqldb.NewGuard(s.d, opts)
			_, err := db.ExecContext(ctx, "CREATE TABLE after_conflict (v INT)")
			require.NoError(t, err)
			tx1, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx1.Rollback() //nolint:errcheck
			tx2, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx2.Rollback() //nolint:errcheck
			require.NoError(t, g.Check(ctx, tx1, "a", 5))
			require.NoError(t, g.Check(ctx, tx2, "b", 6))
			type result struct {
				tx  int
				err error
			}
			results := make(chan result, 2)
			go func() { results <- result{0, g.Check(ctx, tx1, "b", 5)} }()
			go func() { results <- result{1, g.Check(ctx, tx2, "a", 6)} }()
			txs := []*sql.Tx{tx1, tx2}
			victim, survivor := -1, -1
			for range 2 {
				r := <-results
				if r.err == nil {
					survivor = r.tx
					continue
				}
				require.ErrorIs(t, r.err, sqldb.ErrConflict)
				require.Equal(t, -1, victim, "both transactions got a conflict")
				var ce *sqldb.ConflictError
				require.ErrorAs(t, r.err, &ce)
				require.True(t, driver.Retryable(r.err), "a conflict is retryable")
				victim = r.tx
				if s.d == sqldb.MySQL {
					_, err := txs[victim].ExecContext(ctx, "INSERT INTO after_conflict VALUES (1)")
					require.NoError(t, err)
				}
				_ = txs[victim].Rollback()
			}
			require.True(t, victim >= 0 && survivor >= 0, "victim %d, survivor %d", victim, survivor)
			require.NoError(t, txs[survivor].Commit())
			var n int
			require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM after_conflict").Scan(&n))
			if s.d == sqldb.MySQL {
				require.Equal(t, 1, n) // committed although its transaction was "rolled back"
			}
			st := sqldb.NewStore(db, s.d, opts)
			want := fence.Token(5 + survivor)
			for _, r := range []string{"a", "b"} {
				rec, err := st.Get(ctx, r)
				require.ErrorIs(t, err, fence.ErrNotFound)
				require.Equal(t, want, rec.Fence, "fence of %s", r)
			}
		})
	}
}

// TestGuardLockWaitTimeoutIsConflict: a Check that waits on another
// transaction's row lock past innodb_lock_wait_timeout fails with
// ErrConflict (MySQL error 1205), not success.
func TestGuardLockWaitTimeoutIsConflict(t *testing.T) {
	ctx := testCtx(t)
	db := testkit.MySQL(t)
	g := sqldb.NewGuard(sqldb.MySQL, tables(t, db, sqldb.MySQL))
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer holder.Rollback() //nolint:errcheck
	require.NoError(t, g.Check(ctx, holder, "r", 5))

	waiter, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer waiter.Rollback() //nolint:errcheck
	_, err = waiter.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1")
	require.NoError(t, err)
	err = g.Check(ctx, waiter, "r", 6)
	require.ErrorIs(t, err, sqldb.ErrConflict)
	require.NotErrorIs(t, err, fence.ErrStale)
	require.True(t, strings.Contains(err.Error(), "1205"), "the driver's error is kept: %v", err)
}

// TestGuardHoldsRowLockUntilCommit: a newer holder's Check waits for the
// older transaction; once it commits, the newer one proceeds and the older
// token is refused from then on. On MySQL this holds at every isolation
// level, InnoDB's default REPEATABLE READ included, because the fenced
// statement reads the newest committed row, not the transaction's snapshot.
// On PostgreSQL at REPEATABLE READ and SERIALIZABLE the newer transaction
// gets ErrConflict instead (a concurrent update), and must retry.
func TestGuardHoldsRowLockUntilCommit(t *testing.T) {
	levels := []sql.IsolationLevel{sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable}
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			g := sqldb.NewGuard(s.d, opts)
			for _, level := range levels {
				t.Run(level.String(), func(t *testing.T) {
					ctx := testCtx(t)
					txOpts := &sql.TxOptions{Isolation: level}
					r := "r" + level.String()
					old, err := db.BeginTx(ctx, txOpts)
					require.NoError(t, err)
					require.NoError(t, g.Check(ctx, old, r, 5))
					done := make(chan error, 1)
					newer, err := db.BeginTx(ctx, txOpts)
					require.NoError(t, err)
					defer newer.Rollback() //nolint:errcheck
					// The newer transaction's snapshot starts before the
					// older one commits.
					var one int
					require.NoError(t, newer.QueryRowContext(ctx, "SELECT 1").Scan(&one))
					go func() { done <- g.Check(ctx, newer, r, 6) }()
					select {
					case err := <-done:
						t.Fatalf("newer Check returned %v while the older transaction held the row", err)
					case <-time.After(200 * time.Millisecond):
					}
					require.NoError(t, old.Commit())
					err = <-done
					if s.d == sqldb.PostgreSQL && (level == sql.LevelRepeatableRead || level == sql.LevelSerializable) {
						require.ErrorIs(t, err, sqldb.ErrConflict)
						return
					}
					require.NoError(t, err)
					require.NoError(t, newer.Commit())
					late, err := db.BeginTx(ctx, txOpts)
					require.NoError(t, err)
					defer late.Rollback() //nolint:errcheck
					require.ErrorIs(t, g.Check(ctx, late, r, 5), fence.ErrStale)
					rec, err := sqldb.NewStore(db, s.d, opts).Get(ctx, r)
					require.ErrorIs(t, err, fence.ErrNotFound)
					require.Equal(t, fence.Token(6), rec.Fence)
				})
			}
		})
	}
}

// TestBackendDatabaseClock: the expiry follows the server's clock, and two
// sessions with different time_zone settings see the same lease.
func TestBackendDatabaseClock(t *testing.T) {
	ctx := testCtx(t)
	cfg := testkit.MySQLConfig(t)
	east, west := cfg.Clone(), cfg.Clone()
	east.Params = map[string]string{"time_zone": "'+09:00'"}
	west.Params = map[string]string{"time_zone": "'-07:00'"}
	dbE, dbW := testkit.OpenMySQL(t, east), testkit.OpenMySQL(t, west)
	opts := tables(t, dbE, sqldb.MySQL)
	bE, bW := newDirect(dbE, sqldb.MySQL, opts), newDirect(dbW, sqldb.MySQL, opts)
	a, b := testkit.Owner(t), testkit.Owner(t)
	tok, err := bE.Acquire(ctx, "l", a, time.Minute)
	require.NoError(t, err)
	info, err := bW.Inspect(ctx, "l")
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == a && info.Token == tok, "west sees %+v", info)
	require.True(t, info.TTL > 50*time.Second && info.TTL <= time.Minute, "TTL %v from another time zone", info.TTL)
	_, err = bW.Acquire(ctx, "l", b, time.Minute)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.True(t, held.TTL > 50*time.Second, "held TTL %v", held.TTL)

	// A short lease expires by the server's clock, and the next holder's
	// token is higher.
	require.NoError(t, bE.Release(ctx, "l", a))
	short, err := bE.Acquire(ctx, "short", a, 50*time.Millisecond)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		tok2, err := bW.Acquire(ctx, "short", b, time.Minute)
		if err == nil {
			require.Equal(t, short+1, tok2)
			break
		}
		require.ErrorIs(t, err, lock.ErrHeld)
		require.True(t, time.Now().Before(deadline), "a 50ms lease still held after 10s")
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	require.ErrorIs(t, bE.Extend(ctx, "short", a, time.Minute), lock.ErrNotHeld)
}

// TestServerCodeFromDrivers: the drivers' own error types for a deadlock,
// a lock wait timeout and a serialization failure match ErrConflict, and
// other server errors do not.
func TestServerCodeFromDrivers(t *testing.T) {
	ctx := testCtx(t)
	for _, c := range []struct {
		err      error
		conflict bool
	}{
		{&mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, true},
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}, true},
		{&mysql.MySQLError{Number: 1146, Message: "Table doesn't exist"}, false},
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "42P01"}, false},
	} {
		var n atomic.Int64
		db := sql.OpenDB(failing{c.err, &n})
		d := sqldb.MySQL // the dialect of the server whose error it is
		if _, ok := c.err.(*pgconn.PgError); ok {
			d = sqldb.PostgreSQL
		}
		err := sqldb.NewStore(db, d, nil).Put(ctx, "k", 1, nil)
		require.Equal(t, c.conflict, errors.Is(err, sqldb.ErrConflict), "%v", err)
		require.Equal(t, c.conflict, driver.Retryable(err), "retryable %v", err)
		require.ErrorIs(t, err, c.err)
		// An autocommit statement ended by a conflict was undone whole:
		// the Store runs it three times in all before giving up.
		want := int64(1)
		if c.conflict {
			want = 3
		}
		require.Equal(t, want, n.Load(), "statements sent for %v", c.err)
		// Inside the caller's transaction it is never run again: the
		// transaction is gone (1213) or no longer fenced.
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		n.Store(0)
		err = sqldb.NewGuard(d, nil).Check(ctx, tx, "r", 1)
		require.Equal(t, c.conflict, errors.Is(err, sqldb.ErrConflict), "guard: %v", err)
		require.Equal(t, int64(1), n.Load(), "guard statements sent for %v", c.err)
		_ = tx.Rollback()
		_ = db.Close()
	}
	// A missing table on the real server is permanent.
	db := testkit.MySQL(t)
	err := sqldb.NewStore(db, sqldb.MySQL, nil).Put(ctx, "k", 1, nil)
	require.Error(t, err)
	require.False(t, driver.Retryable(err), "missing table retryable: %v", err)
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
}

// TestIdentifiersQuoted: table and column names that need quoting work,
// one table named as both is refused, and malformed names get ErrInvalid.
func TestIdentifiersQuoted(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			opts := &sqldb.Options{StoreTable: sqldb.Identifier{"st`\"; DROP TABLE x; --"}, LeaseTable: sqldb.Identifier{"le`a\"se"}}
			require.NoError(t, sqldb.Migrate(ctx, db, s.d, opts))
			require.NoError(t, sqldb.Migrate(ctx, db, s.d, opts)) // idempotent
			st := sqldb.NewStore(db, s.d, opts)
			require.NoError(t, st.Put(ctx, "k'; --", 1, []byte("v")))
			rec, err := st.Get(ctx, "k'; --")
			require.NoError(t, err)
			require.Equal(t, "v", string(rec.Value))
			_, err = newDirect(db, s.d, opts).Acquire(ctx, "n", testkit.Owner(t), time.Minute)
			require.NoError(t, err)

			same := &sqldb.Options{StoreTable: sqldb.Identifier{"x"}, LeaseTable: sqldb.Identifier{"x"}}
			require.ErrorIs(t, sqldb.Migrate(ctx, db, s.d, same), fence.ErrInvalid)
			var current string
			q := "SELECT DATABASE()"
			if s.d == sqldb.PostgreSQL {
				q = "SELECT current_schema()"
			}
			require.NoError(t, db.QueryRowContext(ctx, q).Scan(&current))
			qualified := &sqldb.Options{StoreTable: sqldb.Identifier{current, "y"}, LeaseTable: sqldb.Identifier{"y"}}
			require.ErrorIs(t, sqldb.Migrate(ctx, db, s.d, qualified), fence.ErrInvalid)
		})
	}
}

// TestMigrateConcurrently: several Migrate calls at once on new tables all
// succeed, on both dialects.
func TestMigrateConcurrently(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			ns := testkit.Namespace(t)
			opts := &sqldb.Options{StoreTable: sqldb.Identifier{ns + "_s"}, LeaseTable: sqldb.Identifier{ns + "_l"}}
			errs := make(chan error, 4)
			for range 4 {
				go func() { errs <- sqldb.Migrate(ctx, db, s.d, opts) }()
			}
			for range 4 {
				require.NoError(t, <-errs)
			}
		})
	}
}

// TestReadAfterCheckSeesPreviousHolder: at InnoDB's default REPEATABLE
// READ, a plain SELECT made after Guard.Check sees what the previous holder
// committed (the snapshot is taken at the first plain read, after Check
// waited for the previous holder's row lock); a plain SELECT made before
// Check reads the older snapshot, which is why the recipes raise the fence
// first.
func TestReadAfterCheckSeesPreviousHolder(t *testing.T) {
	ctx := testCtx(t)
	db := testkit.MySQL(t)
	g := sqldb.NewGuard(sqldb.MySQL, tables(t, db, sqldb.MySQL))
	_, err := db.ExecContext(ctx, "CREATE TABLE acct (id INT PRIMARY KEY, bal INT NOT NULL)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO acct VALUES (1, 100)")
	require.NoError(t, err)
	balance := func(tx *sql.Tx) int {
		var b int
		require.NoError(t, tx.QueryRowContext(ctx, "SELECT bal FROM acct WHERE id = 1").Scan(&b))
		return b
	}

	for _, readFirst := range []bool{false, true} {
		prev, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, g.Check(ctx, prev, "acct", 10))
		_, err = prev.ExecContext(ctx, "UPDATE acct SET bal = bal - 10 WHERE id = 1")
		require.NoError(t, err)
		before := balance(prev) + 10

		next, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		early := -1
		if readFirst {
			early = balance(next) // the mistake: read before the fence
		}
		done := make(chan error, 1)
		go func() { done <- g.Check(ctx, next, "acct", 11) }()
		select {
		case err := <-done:
			t.Fatalf("Check returned %v while the previous holder held the row", err)
		case <-time.After(100 * time.Millisecond):
		}
		require.NoError(t, prev.Commit())
		require.NoError(t, <-done)
		if readFirst {
			require.Equal(t, before, early)
			require.Equal(t, before, balance(next)) // still the old snapshot
		} else {
			require.Equal(t, before-10, balance(next))
		}
		require.NoError(t, next.Rollback())
		_, err = db.ExecContext(ctx, "DELETE FROM "+"acct")
		require.NoError(t, err)
		_, err = db.ExecContext(ctx, "INSERT INTO acct VALUES (1, 100)")
		require.NoError(t, err)
		g = sqldb.NewGuard(sqldb.MySQL, tables(t, db, sqldb.MySQL))
	}
}

// TestSimultaneousAssignment: the MySQL statements give the same results
// when MariaDB assigns the columns of an UPDATE simultaneously (sql_mode
// SIMULTANEOUS_ASSIGNMENT, standard SQL) instead of left to right.
func TestSimultaneousAssignment(t *testing.T) {
	for _, mode := range []string{"default", "SIMULTANEOUS_ASSIGNMENT"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			cfg := testkit.MySQLConfig(t)
			if mode != "default" {
				cfg.Params = map[string]string{"sql_mode": "'STRICT_TRANS_TABLES,SIMULTANEOUS_ASSIGNMENT'"}
			}
			db := testkit.OpenMySQL(t, cfg)
			var got string
			require.NoError(t, db.QueryRowContext(ctx, "SELECT @@SESSION.sql_mode").Scan(&got))
			require.Equal(t, mode != "default", strings.Contains(got, "SIMULTANEOUS_ASSIGNMENT"), "sql_mode %q", got)
			opts := tables(t, db, sqldb.MySQL)

			st := sqldb.NewStore(db, sqldb.MySQL, opts)
			require.NoError(t, st.Put(ctx, "k", 5, []byte("five")))
			require.ErrorIs(t, st.Put(ctx, "k", 4, []byte("four")), fence.ErrStale)
			require.NoError(t, st.Put(ctx, "k", 6, []byte("six")))
			require.ErrorIs(t, st.Delete(ctx, "k", 5), fence.ErrStale)
			require.NoError(t, st.Advance(ctx, "k", 7))
			rec, err := st.Get(ctx, "k")
			require.NoError(t, err)
			require.Equal(t, fence.Record{Value: []byte("six"), Fence: 7}, rec)
			require.NoError(t, st.Delete(ctx, "k", 8))
			rec, err = st.Get(ctx, "k")
			require.ErrorIs(t, err, fence.ErrNotFound)
			require.Equal(t, fence.Token(8), rec.Fence)

			b := newDirect(db, sqldb.MySQL, opts)
			a, c := testkit.Owner(t), testkit.Owner(t)
			t1, err := b.AcquireMeta(ctx, "l", a, 5*time.Second, "holder a") // long enough for the next two calls on a loaded machine
			require.NoError(t, err)
			_, err = b.Acquire(ctx, "l", c, time.Minute)
			require.ErrorIs(t, err, lock.ErrHeld)
			again, err := b.AcquireMeta(ctx, "l", a, time.Minute, "holder a") // same owner: same token, new expiry
			require.NoError(t, err)
			require.Equal(t, t1, again)
			info, err := b.Inspect(ctx, "l")
			require.NoError(t, err)
			require.True(t, info.Held && info.Owner == a && info.Metadata == "holder a" && info.TTL > 30*time.Second, "%+v", info)
			require.NoError(t, b.Release(ctx, "l", a))
			t2, err := b.Acquire(ctx, "l", c, 50*time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, t1+1, t2)
			info, err = b.Inspect(ctx, "l")
			require.NoError(t, err)
			require.Equal(t, "", info.Metadata)
			// Expired: the next owner takes it with the next token.
			deadline := time.Now().Add(10 * time.Second)
			for {
				t3, err := b.Acquire(ctx, "l", a, time.Minute)
				if err == nil {
					require.Equal(t, t2+1, t3)
					break
				}
				require.ErrorIs(t, err, lock.ErrHeld)
				require.True(t, time.Now().Before(deadline), "a 50ms lease still held after 10s")
				time.Sleep(10 * time.Millisecond) // poll interval
			}
			info, err = b.Inspect(ctx, "l")
			require.NoError(t, err)
			require.True(t, info.Owner == a && info.Token == t2+1, "%+v", info)
		})
	}
}
