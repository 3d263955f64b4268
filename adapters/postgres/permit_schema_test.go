package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgqueue"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// On the previous version's schema (lease table with metadata, queue
// table, no permit tables) every permit call fails with ErrNotMigrated
// naming Migrate while single-name locks keep working; Migrate adds the
// permit tables, permits work, and Migrate again changes nothing (the
// token counter carries on).
func TestMigrateAddsPermitTables(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	createPreviousLeaseTable(t, ctx, pool)
	_, err := pool.Exec(ctx, `ALTER TABLE fencekit_leases ADD COLUMN metadata text`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, pgqueue.Table("fencekit_leases_queue"))
	require.NoError(t, err)
	b := newCalls(pool, nil)
	o := newOwner(t)

	_, err = b.permit(ctx, "s", o, semReq(2))
	require.ErrorIs(t, err, postgres.ErrNotMigrated)
	require.ErrorContains(t, err, "postgres.Migrate")
	require.ErrorContains(t, err, "fencekit_leases_permits")
	require.False(t, driver.Retryable(err), "a missing table is permanent")
	for name, err := range map[string]error{
		"Extend":  b.extendPermit(ctx, "s", o, time.Minute),
		"Release": b.releasePermit(ctx, "s", o),
		"Leave":   b.leavePermitLine(ctx, "s", o),
	} {
		require.ErrorIs(t, err, postgres.ErrNotMigrated, name)
	}
	_, err = b.inspectPermits(ctx, "s")
	require.ErrorIs(t, err, postgres.ErrNotMigrated, "Inspect")
	_, err = b.acquire(ctx, "l", o, time.Minute)
	require.NoError(t, err, "a single-name lock before Migrate")

	migrated(t, pool)
	first, err := b.permit(ctx, "s", o, semReq(2))
	require.NoError(t, err)
	migrated(t, pool)
	require.NoError(t, b.releasePermit(ctx, "s", o), "the permit survives a second Migrate")
	next, err := b.permit(ctx, "s", o, semReq(2))
	require.NoError(t, err)
	require.Greater(t, next.Token, first.Token)
}

// Bad input is refused with ErrInvalid by the Client before anything is
// sent to the Backend: on a schema without tables (where anything sent
// would fail with ErrNotMigrated) and on a migrated one, where no row is
// written.
func TestPermitInvalidInput(t *testing.T) {
	ctx := testCtx(t)
	ttl := time.Minute
	for _, migrate := range []bool{false, true} {
		pool := testkit.Postgres(t)
		if migrate {
			migrated(t, pool)
		}
		db := &countingDB{Pool: pool}
		b := postgres.NewBackend(db, nil)
		client := lock.New(b, nil)
		bad := map[string]func() error{
			"semaphore of 0": func() error { _, err := client.Semaphore("s", 0).TryAcquire(ctx, ttl); return err },
			"semaphore over max": func() error {
				_, err := client.Semaphore("s", driver.MaxPermits+1).TryAcquire(ctx, ttl)
				return err
			},
			"ttl below the minimum": func() error { _, err := client.RWLock("s").TryAcquireWrite(ctx, time.Microsecond); return err },
			"place below minimum": func() error {
				queued := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: time.Millisecond}})
				_, err := queued.RWLock("s").AcquireWrite(ctx, ttl)
				return err
			},
		}
		for what, name := range map[string]string{"empty name": "", "NUL in the name": "a\x00b", "long name": strings.Repeat("n", fence.MaxKeyLen+1)} {
			bad["Semaphore.TryAcquire: "+what] = func() error { _, err := client.Semaphore(name, 1).TryAcquire(ctx, ttl); return err }
			bad["RWLock.TryAcquireRead: "+what] = func() error { _, err := client.RWLock(name).TryAcquireRead(ctx, ttl); return err }
			bad["Semaphore.Inspect: "+what] = func() error { _, err := client.Semaphore(name, 1).Inspect(ctx); return err }
			bad["RWLock.Inspect: "+what] = func() error { _, err := client.RWLock(name).Inspect(ctx); return err }
		}
		for what, call := range bad {
			require.ErrorIs(t, call(), fence.ErrInvalid, what)
		}
		require.Zero(t, db.n.Load(), "statements sent by refused calls")
		if !migrate {
			continue
		}
		var rows int
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM fencekit_leases_permits)
    + (SELECT count(*) FROM fencekit_leases_permit_holders) + (SELECT count(*) FROM fencekit_leases_permit_places)`).Scan(&rows))
		require.Zero(t, rows, "rows written by refused calls")

		// A permit renewed with no ttl: refused, nothing sent.
		permit, err := client.Semaphore("s", 1).TryAcquire(ctx, ttl)
		require.NoError(t, err)
		sent := db.n.Load()
		require.ErrorIs(t, permit.Extend(ctx, 0), fence.ErrInvalid, "Extend with no ttl")
		require.Equal(t, sent, db.n.Load(), "statements sent by a refused Extend")
		require.NoError(t, permit.Release(ctx))
	}
}

// A lease table whose name leaves no room for the permit tables' suffixes
// keeps its single-name locks and Migrate; only the permit calls say that
// the name is too long.
func TestPermitTablesNameTooLong(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	opts := &postgres.Options{LeaseTable: pgx.Identifier{strings.Repeat("l", 55)}}
	require.NoError(t, postgres.Migrate(ctx, pool, opts))
	b := newCalls(pool, opts)
	o := newOwner(t)
	_, err := b.acquire(ctx, "l", o, time.Minute)
	require.NoError(t, err)
	_, err = b.permit(ctx, "s", o, semReq(1))
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.ErrorContains(t, err, "permit table")
}

// roundTrips counts what a pool sends: each statement sent on its own and
// each batch (one round trip however many statements it holds), with the
// batches' statements apart; statements prepared on first use are counted
// too (they cost a round trip of their own).
type roundTrips struct {
	trips, batched atomic.Int64
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.trips.Add(1)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.trips.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	r.batched.Add(1)
}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	r.trips.Add(1)
	return ctx
}

func (r *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// Every permit call is one round trip (a changing call is a batch of two
// statements), a refused acquire and a kept place included, once the
// connection has its statements prepared.
func TestPermitRoundTrips(t *testing.T) {
	ctx := testCtx(t)
	cfg := migrated(t, testkit.Postgres(t)).Config()
	counter := &roundTrips{}
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 1 // one connection: its statement cache is warm after the first pass
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	b := newCalls(pool, nil)
	ops := []struct {
		name       string
		statements int64
		run        func(a, w string) error
	}{
		{"Acquire (granted)", 2, func(a, _ string) error { _, err := b.permit(ctx, "s", a, semReq(1)); return err }},
		{"Acquire (same owner)", 2, func(a, _ string) error { _, err := b.permit(ctx, "s", a, semReq(1)); return err }},
		{"Acquire (refused)", 2, func(_, w string) error {
			_, err := b.permit(ctx, "s", w, semReq(1))
			if !isHeld(err) {
				return err
			}
			return nil
		}},
		{"Acquire (place kept)", 2, func(_, w string) error {
			_, err := b.permit(ctx, "s", w, inLine(semReq(1), time.Second))
			if !isHeld(err) {
				return err
			}
			return nil
		}},
		{"Extend", 2, func(a, _ string) error { return b.extendPermit(ctx, "s", a, time.Minute) }},
		{"Inspect", 0, func(string, string) error { _, err := b.inspectPermits(ctx, "s"); return err }},
		{"Leave", 2, func(_, w string) error { return b.leavePermitLine(ctx, "s", w) }},
		{"Release", 2, func(a, _ string) error { return b.releasePermit(ctx, "s", a) }},
	}
	for pass := range 2 {
		a, w := newOwner(t), newOwner(t)
		for _, op := range ops {
			trips, batched := counter.trips.Load(), counter.batched.Load()
			require.NoError(t, op.run(a, w), op.name)
			trips, batched = counter.trips.Load()-trips, counter.batched.Load()-batched
			if pass == 1 {
				t.Logf("%s: %d round trip(s), %d statement(s) batched", op.name, trips, batched)
				require.Equal(t, int64(1), trips, op.name+": round trips")
				require.Equal(t, op.statements, batched, op.name+": statements in the batch")
			}
		}
	}
}

func isHeld(err error) bool { return errors.Is(err, lock.ErrHeld) }

// The after-restore statement of docs/postgres.md frees every permit and
// lifts the tokens of permit names above what was issued before, for names
// that have a state row and, through the floor row, for names new since
// the backup; the prior writer after it is the raised value.
func TestRestoreSQLRaisesPermits(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	a, w := newOwner(t), newOwner(t)
	_, err := b.permit(ctx, "seen", a, writeReq)
	require.NoError(t, err)
	_, err = b.permit(ctx, "seen", w, inLine(writeReq, time.Minute))
	require.ErrorIs(t, err, lock.ErrHeld)

	_, err = pool.Exec(ctx, restoreSQL(t))
	require.NoError(t, err)
	floor := fence.Token(time.Now().Add(-time.Hour).UnixMicro())
	info, err := b.inspectPermits(ctx, "seen")
	require.NoError(t, err)
	require.Empty(t, info.Holders, "permits after the restore statement")
	require.Zero(t, info.Waiting, "places after the restore statement")
	for _, name := range []string{"seen", "never-seen"} {
		p, err := b.permit(ctx, name, w, readReq)
		require.NoError(t, err, name)
		require.Greater(t, p.Token, floor, name)
		require.Greater(t, p.PriorWriter, floor, name+": prior writer")
		require.Greater(t, p.Token, p.PriorWriter, name)
	}
}
