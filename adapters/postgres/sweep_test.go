package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/internal/testkit/require"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// leaseRows returns the number of lock rows in the default lease table,
// the floor row not counted.
func leaseRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM fencekit_leases WHERE name <> ''`).Scan(&n))
	return n
}

// cycle acquires and releases name n times and returns the last token.
func cycle(t *testing.T, ctx context.Context, b calls, name string, n int) fence.Token {
	t.Helper()
	var tok fence.Token
	for i := 0; i < n; i++ {
		owner := newOwner(t)
		var err error
		tok, err = b.acquire(ctx, name, owner, time.Minute)
		require.NoError(t, err)
		require.NoError(t, b.release(ctx, name, owner))
	}
	return tok
}

// sweepUntil sweeps with a tiny idle time until want rows in all went, so
// that the test does not depend on how fast the database clock moves.
func sweepUntil(t *testing.T, ctx context.Context, b calls, want int) {
	t.Helper()
	got := 0
	poll(t, "the sweep of the free rows", func() bool {
		n, err := b.Sweep(ctx, time.Microsecond)
		require.NoError(t, err)
		got += n
		return got >= want
	})
	require.Equal(t, want, got)
}

// After a sweep deletes a lock's row, its next token is still above every
// token it was issued before, for every swept name and over several sweeps;
// store rows are never swept.
func TestSweepKeepsTokensRising(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b, store := newCalls(pool, nil), postgres.NewStore(pool, nil)
	last := map[string]fence.Token{"a": cycle(t, ctx, b, "a", 5), "b": cycle(t, ctx, b, "b", 1)}
	require.NoError(t, store.Put(ctx, "k", last["a"], []byte("v")))

	for round := 0; round < 3; round++ {
		sweepUntil(t, ctx, b, 2)
		require.Zero(t, leaseRows(t, ctx, pool), "round %d: the free rows are gone", round)
		for _, name := range []string{"a", "b"} {
			tok := cycle(t, ctx, b, name, 1)
			require.Greater(t, tok, last[name], "round %d: %s's token after the sweep", round, name)
			last[name] = tok
		}
	}

	v, err := store.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, []byte("v"), v.Value, "Sweep leaves the store table alone")
	require.Equal(t, fence.Token(5), v.Fence)
}

// A held lock's row is never swept, nor a row freed less than idle ago;
// once free for long enough, released and expired rows both go.
func TestSweepSparesHeldAndRecentlyFree(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	holder := newOwner(t)
	held, err := b.acquire(ctx, "held", holder, time.Minute)
	require.NoError(t, err)
	cycle(t, ctx, b, "released", 1)
	_, err = b.acquire(ctx, "expired", newOwner(t), 50*time.Millisecond)
	require.NoError(t, err)
	poll(t, "the expiry", func() bool {
		info, err := b.inspect(ctx, "expired")
		require.NoError(t, err)
		return len(info.Holders) == 0
	})

	n, err := b.Sweep(ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, n, "nothing has been free for an hour")
	require.Equal(t, 3, leaseRows(t, ctx, pool))

	sweepUntil(t, ctx, b, 2)
	require.Equal(t, 1, leaseRows(t, ctx, pool))
	info, err := b.inspect(ctx, "held")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, holder, info.Holders[0].Owner)
	require.Equal(t, held, info.Holders[0].Token)
	require.NoError(t, b.extend(ctx, "held", holder, time.Minute), "the holder's lease is untouched")
}

// An Acquire that starts while a sweep is deleting its row waits for the
// sweep and then mints above the swept token. Without the sweep's table
// lock it would wait for the row lock only, then insert a new row from the
// floor its snapshot saw before the sweep: a lower token.
func TestSweepRacingAcquire(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	before := cycle(t, ctx, b, "x", 3)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var sweeper int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&sweeper))
	n := 0
	poll(t, "the sweep of x", func() bool {
		var err error
		n, err = postgres.SweepInForTest(ctx, b.Backend, tx, time.Microsecond)
		require.NoError(t, err)
		return n == 1
	})

	// Inspect is not held back by the sweep's table lock.
	inspectCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := b.inspect(inspectCtx, "l-other")
	require.NoError(t, err)
	require.Empty(t, info.Holders)

	got := make(chan fence.Token, 1)
	go func() {
		tok, err := b.acquire(ctx, "x", newOwner(t), time.Minute)
		if err != nil {
			t.Errorf("Acquire: %v", err)
		}
		got <- tok
	}()
	poll(t, "the acquire waiting for the sweep", func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT count(*) > 0 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`,
			sweeper).Scan(&waiting))
		return waiting
	})
	require.NoError(t, tx.Commit(ctx))
	require.Greater(t, <-got, before)
}

// Workers acquire and release a few locks while a sweeper deletes their
// rows as soon as they are free: every holder's token is above its
// predecessor's.
func TestSweepConcurrentAcquire(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	names := []string{"p", "q", "r"}
	const workers, rounds = 4, 60

	var (
		mu    sync.Mutex
		last  = map[string]fence.Token{}
		swept int
		wg    sync.WaitGroup
	)
	done := make(chan struct{})
	sweeperDone := make(chan struct{})
	go func() {
		defer close(sweeperDone)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, err := b.Sweep(ctx, time.Microsecond)
			if err != nil {
				t.Errorf("Sweep: %v", err)
				return
			}
			swept += n
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			owner := newOwner(t)
			for i := 0; i < rounds; i++ {
				name := names[(w+i)%len(names)]
				tok, err := b.acquire(ctx, name, owner, time.Minute)
				for errors.Is(err, lock.ErrHeld) {
					time.Sleep(time.Millisecond) // back-off, not synchronisation
					tok, err = b.acquire(ctx, name, owner, time.Minute)
				}
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				// Holders of one name are serialised by the lock itself.
				mu.Lock()
				if tok <= last[name] {
					t.Errorf("%s: token %d after %d", name, tok, last[name])
				}
				last[name] = tok
				mu.Unlock()
				if err := b.release(ctx, name, owner); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(done)
	<-sweeperDone
	require.Positive(t, swept, "the sweeper deleted rows while the workers ran")
	t.Logf("%d acquisitions, %d rows swept, last tokens %v", workers*rounds, swept, last)
}

// Sweep refuses a non-positive idle time and a misconfigured Backend with
// fence.ErrInvalid, deletes nothing then, and honours its context.
func TestSweepInvalidInput(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	cycle(t, ctx, b, "l", 1)
	for _, idle := range []time.Duration{0, -time.Second} {
		n, err := b.Sweep(ctx, idle)
		require.ErrorIs(t, err, fence.ErrInvalid)
		require.Zero(t, n)
	}
	_, err := newCalls(nil, nil).Sweep(ctx, time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
	_, err = newCalls(pool, &postgres.Options{LeaseTable: []string{""}}).Sweep(ctx, time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.Sweep(canceled, time.Microsecond)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, leaseRows(t, ctx, pool), "nothing was swept")
}

// A lease table created by the previous Migrate (no floor row, released
// rows with expires_at NULL) works as it is: Migrate still succeeds on it,
// Sweep takes the old released rows, and tokens keep rising.
func TestSweepOnPreviousSchema(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	createPreviousLeaseTable(t, ctx, pool)
	var err error
	// The previous Release cleared expires_at.
	_, err = pool.Exec(ctx, `INSERT INTO fencekit_leases VALUES ('old', NULL, 7, NULL)`)
	require.NoError(t, err)
	migrated(t, pool)
	migrated(t, pool)

	b := newCalls(pool, nil)
	n, err := b.Sweep(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a row freed by the previous Release counts as long idle")
	require.Greater(t, cycle(t, ctx, b, "old", 1), fence.Token(7))
	migrated(t, pool)
	require.Greater(t, cycle(t, ctx, b, "new", 1), fence.Token(0))
}

// Acquire on a swept name is one statement, like any Acquire.
func TestSweepThenAcquireIsOneStatement(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	db := &countingDB{Pool: pool}
	b := newCalls(db, nil)
	before := cycle(t, ctx, b, "l", 2)
	sweepUntil(t, ctx, b, 1)
	n := db.n.Load()
	tok, err := b.acquire(ctx, "l", newOwner(t), time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(1), db.n.Load()-n)
	require.Equal(t, before+1, tok)
}

// Sweep waits for lock statements in flight; its context bounds that wait.
func TestSweepHonoursContextWhileWaiting(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	cycle(t, ctx, b, "l", 1)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	// What an Acquire in flight holds: ROW EXCLUSIVE on the table.
	_, err = tx.Exec(ctx, `LOCK TABLE fencekit_leases IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	n, err := b.Sweep(short, time.Microsecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, n)
	require.NoError(t, tx.Rollback(ctx))
	sweepUntil(t, ctx, b, 1)
}

// The after-restore statement of docs/postgres.md also lifts locks that
// have no row (new since the backup, or swept) above the restored tokens.
func TestRestoreSQLRaisesTheFloor(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	// No sweep has run yet, so there is no floor row before the restore.
	cycle(t, ctx, b, "seen", 2)
	_, err := pool.Exec(ctx, restoreSQL(t))
	require.NoError(t, err)
	floor := fence.Token(time.Now().Add(-time.Hour).UnixMicro())
	require.Greater(t, cycle(t, ctx, b, "seen", 1), floor)
	require.Greater(t, cycle(t, ctx, b, "never-seen", 1), floor)
	sweepUntil(t, ctx, b, 2)
	require.Greater(t, cycle(t, ctx, b, "seen", 1), floor)
}

// docs/postgres.md shows the sweep statement as it is.
func TestDocShowsSweepSQL(t *testing.T) {
	sql := strings.ReplaceAll(postgres.SweepSQLForTest(), `"fencekit_leases"`, "fencekit_leases")
	require.True(t, strings.Contains(readDoc(t), "```sql\n"+sql+"\n```"),
		"update the sweep statement in docs/postgres.md to:\n%s", sql)
}
