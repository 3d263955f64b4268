package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

func testCtx(t *testing.T) context.Context { return testkit.Context(t) }

func newOwner(t *testing.T) string { return testkit.Owner(t) }

// createPreviousLeaseTable creates the lease table as Migrate made it before
// leases carried metadata and before Sweep, for the upgrade tests.
func createPreviousLeaseTable(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `CREATE TABLE fencekit_leases (
    name       text COLLATE "C" PRIMARY KEY,
    owner      text,
    token      bigint NOT NULL CHECK (token >= 1),
    expires_at timestamptz
)`)
	require.NoError(t, err)
}

// poll calls cond until it is true, failing t after 10 s.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 10s", what)
		}
		time.Sleep(2 * time.Millisecond) // poll interval, not synchronisation
	}
}

// Many writers with tokens 33 and 34 race under READ COMMITTED: once a write
// with 34 has succeeded, every write with 33 that starts afterwards is
// refused, and 34 is what remains.
func TestPutRaceTwoTokens(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	store := postgres.NewStore(pool, nil)
	var level string
	require.NoError(t, pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level))
	require.Equal(t, "read committed", level)

	for round := 0; round < 5; round++ {
		key := fmt.Sprintf("race-%d", round)
		var (
			wg        sync.WaitGroup
			won34     atomic.Bool
			accepted  [2]atomic.Int64
			lateAfter atomic.Int64 // 33 accepted although started after 34 won
			start     = make(chan struct{})
			errs      = make(chan error, 64)
		)
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				<-start
				for i := 0; i < 8; i++ {
					tok := fence.Token(33 + (g+i)%2)
					after := won34.Load()
					err := store.Put(ctx, key, tok, []byte(tok.String()))
					switch {
					case err == nil:
						accepted[tok-33].Add(1)
						if tok == 34 {
							won34.Store(true)
						} else if after {
							lateAfter.Add(1)
						}
					case errors.Is(err, fence.ErrStale):
						var se *fence.StaleError
						if !errors.As(err, &se) || se.Token != 33 || se.Fence != 34 {
							errs <- fmt.Errorf("refusal %v; want token 33 against fence 34", err)
						}
					default:
						errs <- err
					}
				}
			}(g)
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := lateAfter.Load(); n != 0 {
			t.Errorf("%d writes with 33 accepted after a write with 34 had succeeded", n)
		}
		if accepted[1].Load() <= 0 {
			t.Errorf("no write with 34 was accepted")
		}
		rec, err := store.Get(ctx, key)
		require.NoError(t, err)
		if rec.Fence != fence.Token(34) || string(rec.Value) != "34" {
			t.Errorf("final record: fence %d, value %q; want 34, %q", rec.Fence, rec.Value, "34")
		}
		require.ErrorIs(t, store.Put(ctx, key, 33, []byte("late")), fence.ErrStale)
		t.Logf("round %d: accepted 33×%d, 34×%d", round, accepted[0].Load(), accepted[1].Load())
	}
}

// The first write to a missing key races between many tokens: the highest
// wins, whatever the order the inserts arrive in.
func TestFirstWriteRace(t *testing.T) {
	ctx := testCtx(t)
	store := postgres.NewStore(migrated(t, testkit.Postgres(t)), nil)
	for round := 0; round < 10; round++ {
		key := fmt.Sprintf("first-%d", round)
		const n = 12
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 1; i <= n; i++ {
			wg.Add(1)
			go func(tok fence.Token) {
				defer wg.Done()
				<-start
				var err error
				switch tok % 3 { // a mix of first writes: Put, Advance, Delete
				case 0:
					err = store.Advance(ctx, key, tok)
				case 1:
					err = store.Delete(ctx, key, tok)
				default:
					err = store.Put(ctx, key, tok, []byte(tok.String()))
				}
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("token %d: %v", tok, err)
				}
			}(fence.Token(i))
		}
		close(start)
		wg.Wait()
		rec, err := store.Get(ctx, key)
		if err != nil {
			require.ErrorIs(t, err, fence.ErrNotFound)
		}
		require.Equal(t, fence.Token(n), rec.Fence, "round %d", round)
	}
}

// beginAt starts a transaction at level and takes its snapshot.
func beginAt(t *testing.T, ctx context.Context, pool *pgxpool.Pool, level pgx.TxIsoLevel) pgx.Tx {
	t.Helper()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1") // the snapshot is taken by the first statement
	require.NoError(t, err)
	return tx
}

func requireConflict(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err, "a concurrent change must not succeed silently")
	require.ErrorIs(t, err, postgres.ErrConflict)
	var ce *postgres.ConflictError
	require.ErrorAs(t, err, &ce)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Contains(t, []string{"40001", "40P01"}, pgErr.Code)
	t.Logf("conflict: %v", err)
}

// Inside a caller's REPEATABLE READ or SERIALIZABLE transaction, a write to
// a key that another transaction changed after the snapshot is a typed
// conflict, never a silent success; nothing of it is applied.
func TestConflictUnderStrictIsolation(t *testing.T) {
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			ctx := testCtx(t)
			pool := migrated(t, testkit.Postgres(t))
			store := postgres.NewStore(pool, nil)
			ops := map[string]func(tx pgx.Tx, key string) error{
				"Put": func(tx pgx.Tx, key string) error {
					return postgres.NewStore(tx, nil).Put(ctx, key, 9, []byte("tx"))
				},
				"Advance": func(tx pgx.Tx, key string) error { return postgres.NewStore(tx, nil).Advance(ctx, key, 9) },
				"Delete":  func(tx pgx.Tx, key string) error { return postgres.NewStore(tx, nil).Delete(ctx, key, 9) },
				"Guard":   func(tx pgx.Tx, key string) error { return postgres.NewGuard(nil).Check(ctx, tx, key, 9) },
			}
			for name, op := range ops {
				for _, existed := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/existed=%v", name, existed), func(t *testing.T) {
						key := fmt.Sprintf("%s-%v", name, existed)
						if existed {
							require.NoError(t, store.Put(ctx, key, 1, []byte("v1")))
						}
						tx := beginAt(t, ctx, pool, level)
						// Another transaction writes the key and commits
						// after tx took its snapshot.
						require.NoError(t, store.Put(ctx, key, 5, []byte("other")))
						requireConflict(t, op(tx, key))
						require.NoError(t, tx.Rollback(ctx))
						rec, err := store.Get(ctx, key)
						require.NoError(t, err)
						require.Equal(t, fence.Record{Value: []byte("other"), Fence: 5}, rec)
					})
				}
			}
		})
	}
}

// Two READ COMMITTED transactions fencing two keys in opposite orders
// deadlock; the one PostgreSQL aborts gets a typed conflict.
func TestDeadlockIsConflict(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	store := postgres.NewStore(pool, nil)
	require.NoError(t, store.Put(ctx, "a", 1, nil))
	require.NoError(t, store.Put(ctx, "b", 1, nil))

	txs := make([]pgx.Tx, 2)
	for i := range txs {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		// Detect the deadlock quickly (allowed for superusers; harmless if not).
		_, _ = tx.Exec(ctx, "SAVEPOINT s")
		if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '20ms'"); err != nil {
			_, _ = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
		}
		txs[i] = tx
	}
	guard := postgres.NewGuard(nil)
	require.NoError(t, guard.Check(ctx, txs[0], "a", 2))
	require.NoError(t, guard.Check(ctx, txs[1], "b", 2))
	type result struct {
		i   int
		err error
	}
	results := make(chan result, 2)
	go func() { results <- result{0, guard.Check(ctx, txs[0], "b", 2)} }()
	go func() { results <- result{1, guard.Check(ctx, txs[1], "a", 2)} }()
	// PostgreSQL aborts one of them with a deadlock error, which releases
	// its locks at once, so the other proceeds; the two replies can arrive
	// in either order.
	r1, r2 := <-results, <-results
	if r1.err == nil {
		r1, r2 = r2, r1
	}
	requireConflict(t, r1.err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, r1.err, &pgErr)
	require.Equal(t, "40P01", pgErr.Code)
	require.NoError(t, r2.err)
	require.NoError(t, txs[r1.i].Rollback(ctx))
	require.NoError(t, txs[r2.i].Commit(ctx))
}

// The Guard recipe: a stale holder's transaction, which already changed the
// caller's own rows, is refused at Check and rolled back; none of its
// changes are visible afterwards.
func TestGuardRefusesStaleTransaction(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	_, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts VALUES ('alice', 100), ('bob', 0)`)
	require.NoError(t, err)
	guard := postgres.NewGuard(nil)
	transfer := func(tx pgx.Tx, amount int) {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = 'alice'`, amount)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = 'bob'`, amount)
		require.NoError(t, err)
	}
	balances := func() (a, b int) {
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT (SELECT balance FROM accounts WHERE id='alice'), (SELECT balance FROM accounts WHERE id='bob')`).Scan(&a, &b))
		return a, b
	}

	// The new holder (token 8) transfers 30 and commits.
	txNew, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, guard.Check(ctx, txNew, "accounts", 8))
	transfer(txNew, 30)
	require.NoError(t, txNew.Commit(ctx))

	// The old holder (token 7) wakes up, changes the rows, then checks.
	txOld, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txOld.Rollback(ctx)
	transfer(txOld, 50)
	err = guard.Check(ctx, txOld, "accounts", 7)
	require.ErrorIs(t, err, fence.ErrStale)
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, fence.StaleError{Key: "accounts", Token: 7, Fence: 8}, *se)
	require.NoError(t, txOld.Rollback(ctx))

	a, b := balances()
	require.Equal(t, [2]int{70, 30}, [2]int{a, b}, "only the new holder's transfer may be visible")
}

// A Check holds the resource's row lock until commit: a newer holder's Check
// waits for the older transaction to finish, so the two never interleave.
func TestGuardSerializesHolders(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	guard := postgres.NewGuard(nil)

	txOld, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txOld.Rollback(ctx)
	require.NoError(t, guard.Check(ctx, txOld, "res", 1))

	txNew, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txNew.Rollback(ctx)
	var newPID uint32
	require.NoError(t, txNew.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&newPID))
	done := make(chan error, 1)
	go func() { done <- guard.Check(ctx, txNew, "res", 2) }()

	poll(t, "the newer Check waiting for the row lock", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, newPID).Scan(&waiting)
		return err == nil && waiting
	})
	select {
	case err := <-done:
		t.Fatalf("newer Check returned %v while the older transaction was open", err)
	default:
	}
	require.NoError(t, txOld.Commit(ctx))
	require.NoError(t, <-done)
	require.NoError(t, txNew.Commit(ctx))

	rec, err := postgres.NewStore(pool, nil).Get(ctx, "res")
	require.ErrorIs(t, err, fence.ErrNotFound)
	require.Equal(t, fence.Token(2), rec.Fence)
}

// Table names with quotes, semicolons and spaces are identifiers, never SQL.
func TestHostileTableNames(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	_, err := pool.Exec(ctx, `CREATE TABLE x (v int); CREATE SCHEMA "odd ""schema"""`)
	require.NoError(t, err)
	var schema string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA "odd ""schema""" CASCADE`)
	})

	for _, opts := range []*postgres.Options{
		{StoreTable: pgx.Identifier{`we"ird; DROP TABLE x; --`}, LeaseTable: pgx.Identifier{`le"ase'; DROP TABLE x; --`}},
		{StoreTable: pgx.Identifier{`odd "schema"`, `t; DROP TABLE x`}, LeaseTable: pgx.Identifier{`odd "schema"`, `a b`}},
	} {
		require.NoError(t, postgres.Migrate(ctx, pool, opts))
		require.NoError(t, postgres.Migrate(ctx, pool, opts), "Migrate must be idempotent")
		store := postgres.NewStore(pool, opts)
		require.NoError(t, store.Put(ctx, "k'; DROP TABLE x; --", 2, []byte("v")))
		require.ErrorIs(t, store.Put(ctx, "k'; DROP TABLE x; --", 1, []byte("old")), fence.ErrStale)
		rec, err := store.Get(ctx, "k'; DROP TABLE x; --")
		require.NoError(t, err)
		require.Equal(t, "v", string(rec.Value))
		require.NoError(t, postgres.NewGuard(opts).Check(ctx, pool, "r", 1))

		b := newCalls(pool, opts)
		o := newOwner(t)
		tok, err := b.acquire(ctx, "l'; DROP TABLE x; --", o, time.Minute)
		require.NoError(t, err)
		require.Equal(t, fence.Token(1), tok)
		require.NoError(t, b.release(ctx, "l'; DROP TABLE x; --", o))
		tok, err = b.enqueue(ctx, "l'; DROP TABLE x; --", o, time.Minute, time.Second)
		require.NoError(t, err)
		require.Equal(t, fence.Token(2), tok)
		_, err = b.enqueue(ctx, "l'; DROP TABLE x; --", newOwner(t), time.Minute, time.Second)
		require.ErrorIs(t, err, lock.ErrHeld)
		require.NoError(t, b.release(ctx, "l'; DROP TABLE x; --", o))
		p, err := b.permit(ctx, "l'; DROP TABLE x; --", o, driver.Request{Kind: driver.Semaphore, Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
		require.Equal(t, fence.Token(1), p.Token, "a permit's tokens are its own")
		_, err = b.permit(ctx, "l'; DROP TABLE x; --", newOwner(t), driver.Request{Kind: driver.Semaphore, Limit: 1, TTL: time.Minute, Place: time.Second})
		require.ErrorIs(t, err, lock.ErrHeld)
		require.NoError(t, b.releasePermit(ctx, "l'; DROP TABLE x; --", o))
	}
	var tables []string
	rows, err := pool.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_tables WHERE schemaname IN ($1, 'odd "schema"') ORDER BY 1`, schema)
	require.NoError(t, err)
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		schema + ".x",
		schema + `.we"ird; DROP TABLE x; --`,
		schema + `.le"ase'; DROP TABLE x; --`,
		schema + `.le"ase'; DROP TABLE x; --_queue`,
		schema + `.le"ase'; DROP TABLE x; --_permits`,
		schema + `.le"ase'; DROP TABLE x; --_permit_holders`,
		schema + `.le"ase'; DROP TABLE x; --_permit_places`,
		`odd "schema".t; DROP TABLE x`,
		`odd "schema".a b`,
		`odd "schema".a b_queue`,
		`odd "schema".a b_permits`,
		`odd "schema".a b_permit_holders`,
		`odd "schema".a b_permit_places`,
	}, tables)
}

// Tokens and fences are rows in the database: they survive a clean restart
// and a crash of the server, and keep rising afterwards.
func TestTokensSurviveRestart(t *testing.T) {
	srv := testkit.NewPostgresServer(t)
	ctx := testCtx(t)
	{
		// The server runs with synchronous_commit=off for speed, which can
		// lose the last commits in a crash. Production runs with it on; so
		// does this database from now on (see docs/postgres.md).
		conn, err := pgx.Connect(ctx, srv.URL())
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "ALTER DATABASE postgres SET synchronous_commit = on")
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))
	}
	pool := migrated(t, srv.Pool(t))
	b := newCalls(pool, nil)
	store := postgres.NewStore(pool, nil)

	var tokens []fence.Token
	cycle := func(label string) {
		t.Helper()
		o := newOwner(t)
		tok, err := b.acquire(ctx, "job", o, time.Minute)
		require.NoError(t, err, label)
		if n := len(tokens); n > 0 {
			require.Greater(t, tok, tokens[n-1], "%s: token must rise", label)
		}
		tokens = append(tokens, tok)
		require.NoError(t, store.Put(ctx, "data", tok, []byte(label)), label)
		require.NoError(t, b.release(ctx, "job", o), label)
		t.Logf("%-22s token %d", label, tok)
	}
	cycle("before restart")
	cycle("before restart")
	// A lease left held across the restart: its token must not be reused.
	held := newOwner(t)
	heldTok, err := b.acquire(ctx, "job", held, 200*time.Millisecond)
	require.NoError(t, err)
	tokens = append(tokens, heldTok)
	t.Logf("%-22s token %d (left held, TTL 200ms)", "before restart", heldTok)

	srv.Stop()
	srv.Start()
	info, err := b.inspect(ctx, "job")
	require.NoError(t, err)
	t.Logf("after stop/start: %+v", info)
	poll(t, "the held lease to expire", func() bool {
		info, err := b.inspect(ctx, "job")
		return err == nil && len(info.Holders) == 0
	})
	cycle("after stop/start")

	srv.Kill()
	srv.Start()
	cycle("after kill/start")

	rec, err := store.Get(ctx, "data")
	require.NoError(t, err)
	require.Equal(t, tokens[len(tokens)-1], rec.Fence)
	require.ErrorIs(t, store.Put(ctx, "data", tokens[0], []byte("stale")), fence.ErrStale)
	t.Logf("tokens in order: %v", tokens)
}

// No session state: a lease taken through one pool is extended,
// re-acquired and released through another, whose connections are others.
func TestAnyConnection(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	other, err := pgxpool.NewWithConfig(ctx, pool.Config())
	require.NoError(t, err)
	t.Cleanup(other.Close)
	var pid1, pid2 uint32
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid1))
	require.NoError(t, other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2))
	require.NotEqual(t, pid1, pid2)

	on1 := newCalls(pool, nil)
	on2 := newCalls(other, nil)
	o := newOwner(t)
	tok, err := on1.acquire(ctx, "l", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, on2.extend(ctx, "l", o, 2*time.Minute))
	again, err := on2.acquire(ctx, "l", o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, tok, again, "same owner, other connection: same token")
	_, err = on2.acquire(ctx, "l", newOwner(t), time.Minute)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.Greater(t, held.TTL, 30*time.Second)
	require.NoError(t, on2.release(ctx, "l", o))

	info, err := on1.inspect(ctx, "l")
	require.NoError(t, err)
	require.Empty(t, info.Holders)
	next, err := on1.acquire(ctx, "l", newOwner(t), time.Minute)
	require.NoError(t, err)
	require.Equal(t, tok+1, next, "release keeps the token; the next holder gets the next one")
}

// Bad input is refused with fence.ErrInvalid, and nothing is written.
func TestInvalidInput(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	badOpts := []*postgres.Options{
		{StoreTable: pgx.Identifier{""}},
		{StoreTable: pgx.Identifier{"a", ""}},
		{StoreTable: pgx.Identifier{"a", "b", "c"}},
		{LeaseTable: pgx.Identifier{"nul\x00"}},
		{LeaseTable: pgx.Identifier{strings.Repeat("l", 64)}},
	}
	for _, opts := range badOpts {
		require.ErrorIs(t, postgres.Migrate(ctx, pool, opts), fence.ErrInvalid, "%+v", opts)
		_, err := postgres.MigrateSQL(opts)
		require.ErrorIs(t, err, fence.ErrInvalid)
		s := postgres.NewStore(pool, opts)
		require.ErrorIs(t, s.Put(ctx, "k", 1, nil), fence.ErrInvalid)
		_, err = s.Get(ctx, "k")
		require.ErrorIs(t, err, fence.ErrInvalid)
		require.ErrorIs(t, postgres.NewGuard(opts).Check(ctx, pool, "k", 1), fence.ErrInvalid)
		b := newCalls(pool, opts)
		_, err = b.acquire(ctx, "l", newOwner(t), time.Second)
		require.ErrorIs(t, err, fence.ErrInvalid)
		_, err = b.inspect(ctx, "l")
		require.ErrorIs(t, err, fence.ErrInvalid)
	}
	require.ErrorIs(t, postgres.Migrate(ctx, nil, nil), fence.ErrInvalid)
	require.ErrorIs(t, postgres.NewStore(nil, nil).Put(ctx, "k", 1, nil), fence.ErrInvalid)
	_, err := newCalls(nil, nil).acquire(ctx, "l", "o", time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)

	store, guard := postgres.NewStore(pool, nil), postgres.NewGuard(nil)
	require.ErrorIs(t, guard.Check(ctx, pool, "k", 0), fence.ErrInvalid)
	require.ErrorIs(t, guard.Check(ctx, pool, "", 1), fence.ErrInvalid)
	require.ErrorIs(t, guard.Check(ctx, nil, "k", 1), fence.ErrInvalid)
	require.ErrorIs(t, store.Put(ctx, "k", -5, nil), fence.ErrInvalid)
	require.ErrorIs(t, store.Advance(ctx, "k\x00", 1), fence.ErrInvalid)
	// The Backend's bad input is refused by the Client over it: a TTL
	// below the minimum (to take or renew a lease), an empty owner (of a
	// lease to resume), a name that is not UTF-8.
	client := lock.New(postgres.NewBackend(pool, nil), nil)
	_, err = client.TryAcquire(ctx, "l", time.Microsecond)
	require.ErrorIs(t, err, fence.ErrInvalid)
	_, err = client.Resume(ctx, "l", "o", time.Microsecond)
	require.ErrorIs(t, err, fence.ErrInvalid)
	_, err = client.Resume(ctx, "l", "", time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
	_, err = client.Inspect(ctx, "bad\xff")
	require.ErrorIs(t, err, fence.ErrInvalid)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM fencekit_store) + (SELECT count(*) FROM fencekit_leases)`).Scan(&n))
	require.Zero(t, n, "refused input wrote rows")
}

// Migrate is idempotent and safe to run from several connections at once.
func TestMigrateConcurrently(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	opts := &postgres.Options{StoreTable: pgx.Identifier{"s"}, LeaseTable: pgx.Identifier{"l"}}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := postgres.Migrate(ctx, pool, opts); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, postgres.Migrate(ctx, pool, opts))

	// Also inside the caller's transaction.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, postgres.Migrate(ctx, tx, nil))
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, postgres.NewStore(pool, nil).Put(ctx, "k", 1, nil))

	sql, err := postgres.MigrateSQL(nil)
	require.NoError(t, err)
	require.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "fencekit_store"`)
	require.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "fencekit_leases"`)
}

// A held lock's HeldError carries the remaining TTL from the database clock.
func TestHeldErrorTTL(t *testing.T) {
	ctx := testCtx(t)
	b := newCalls(migrated(t, testkit.Postgres(t)), nil)
	_, err := b.acquire(ctx, "l", newOwner(t), 5*time.Second)
	require.NoError(t, err)
	_, err = b.acquire(ctx, "l", newOwner(t), time.Second)
	require.ErrorIs(t, err, lock.ErrHeld)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "l", held.Name)
	require.Greater(t, held.TTL, 3*time.Second)
	require.LessOrEqual(t, held.TTL, 5*time.Second)
}

// countingDB counts the statements sent through it, and the connections
// taken from it (for a batch or a transaction).
type countingDB struct {
	postgres.Pool
	n atomic.Int64
}

func (c *countingDB) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	c.n.Add(1)
	return c.Pool.Acquire(ctx)
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.Pool.Exec(ctx, sql, args...)
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.Pool.Query(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.Pool.QueryRow(ctx, sql, args...)
}

// Every operation is one statement, a refused acquire included: under
// contention the refused attempts are most of the traffic.
func TestOneStatementPerOperation(t *testing.T) {
	ctx := testCtx(t)
	db := &countingDB{Pool: migrated(t, testkit.Postgres(t))}
	b := newCalls(db, nil)
	s := postgres.NewStore(db, nil)
	a, other := newOwner(t), newOwner(t)
	ops := []struct {
		name string
		run  func() error
	}{
		{"Acquire", func() error { _, err := b.acquire(ctx, "l", a, 5*time.Second); return err }},
		{"Acquire of a held lock", func() error {
			_, err := b.acquire(ctx, "l", other, time.Second)
			if !errors.Is(err, lock.ErrHeld) {
				return fmt.Errorf("want ErrHeld, got %v", err)
			}
			var held *driver.HeldError
			if !errors.As(err, &held) || held.TTL <= 3*time.Second {
				return fmt.Errorf("want the holder's TTL, got %v", err)
			}
			return nil
		}},
		{"Extend", func() error { return b.extend(ctx, "l", a, 5*time.Second) }},
		{"Inspect", func() error { _, err := b.inspect(ctx, "l"); return err }},
		{"Release", func() error { return b.release(ctx, "l", a) }},
		{"Put", func() error { return s.Put(ctx, "k", 3, []byte("v")) }},
		{"Get", func() error { _, err := s.Get(ctx, "k"); return err }},
		{"Advance", func() error { return s.Advance(ctx, "k", 4) }},
		{"Delete", func() error { return s.Delete(ctx, "k", 4) }},
	}
	for _, op := range ops {
		before := db.n.Load()
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		if n := db.n.Load() - before; n != 1 {
			t.Errorf("%s sent %d statements; want 1", op.name, n)
		}
	}
}
