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
	b := postgres.NewBackend(pool, nil)
	o := newOwner(t)

	_, err = b.AcquirePermit(ctx, "s", o, semReq(2))
	require.ErrorIs(t, err, postgres.ErrNotMigrated)
	require.ErrorContains(t, err, "postgres.Migrate")
	require.ErrorContains(t, err, "fencekit_leases_permits")
	require.False(t, lock.Retryable(err), "a missing table is permanent")
	for name, err := range map[string]error{
		"ExtendPermit":    b.ExtendPermit(ctx, "s", o, time.Minute),
		"ReleasePermit":   b.ReleasePermit(ctx, "s", o),
		"LeavePermitLine": b.LeavePermitLine(ctx, "s", o),
	} {
		require.ErrorIs(t, err, postgres.ErrNotMigrated, name)
	}
	_, err = b.InspectPermits(ctx, "s")
	require.ErrorIs(t, err, postgres.ErrNotMigrated, "InspectPermits")
	_, err = b.Acquire(ctx, "l", o, time.Minute)
	require.NoError(t, err, "a single-name lock before Migrate")

	migrated(t, pool)
	first, err := b.AcquirePermit(ctx, "s", o, semReq(2))
	require.NoError(t, err)
	migrated(t, pool)
	require.NoError(t, b.ReleasePermit(ctx, "s", o), "the permit survives a second Migrate")
	next, err := b.AcquirePermit(ctx, "s", o, semReq(2))
	require.NoError(t, err)
	require.Greater(t, next.Token, first.Token)
}

// Bad input is refused with ErrInvalid before anything is sent: on a
// schema without tables (where anything sent would fail with
// ErrNotMigrated) and on a migrated one, where no row is written.
func TestPermitInvalidInput(t *testing.T) {
	ctx := testCtx(t)
	o := newOwner(t)
	ttl := time.Minute
	bad := map[string]lock.PermitRequest{
		"no kind":               {TTL: ttl},
		"unknown kind":          {Kind: 9, TTL: ttl},
		"semaphore of 0":        {Kind: lock.SemaphorePermit, TTL: ttl},
		"semaphore over max":    {Kind: lock.SemaphorePermit, Limit: lock.MaxPermits + 1, TTL: ttl},
		"reader with a limit":   {Kind: lock.ReadPermit, Limit: 2, TTL: ttl},
		"ttl below the minimum": {Kind: lock.WritePermit, TTL: time.Microsecond},
		"place below minimum":   {Kind: lock.WritePermit, TTL: ttl, Place: time.Millisecond},
	}
	for _, migrate := range []bool{false, true} {
		pool := testkit.Postgres(t)
		if migrate {
			migrated(t, pool)
		}
		b := postgres.NewBackend(pool, nil)
		for what, req := range bad {
			_, err := b.AcquirePermit(ctx, "s", o, req)
			require.ErrorIs(t, err, fence.ErrInvalid, what)
		}
		for what, name := range map[string]string{"empty name": "", "NUL in the name": "a\x00b", "long name": strings.Repeat("n", fence.MaxKeyLen+1)} {
			_, err := b.AcquirePermit(ctx, name, o, semReq(1))
			require.ErrorIs(t, err, fence.ErrInvalid, "AcquirePermit: "+what)
			require.ErrorIs(t, b.ExtendPermit(ctx, name, o, ttl), fence.ErrInvalid, "ExtendPermit: "+what)
			require.ErrorIs(t, b.ReleasePermit(ctx, name, o), fence.ErrInvalid, "ReleasePermit: "+what)
			require.ErrorIs(t, b.AwaitPermit(ctx, name, o, time.Millisecond), fence.ErrInvalid, "AwaitPermit: "+what)
			require.ErrorIs(t, b.LeavePermitLine(ctx, name, o), fence.ErrInvalid, "LeavePermitLine: "+what)
			_, err = b.InspectPermits(ctx, name)
			require.ErrorIs(t, err, fence.ErrInvalid, "InspectPermits: "+what)
		}
		_, err := b.AcquirePermit(ctx, "s", "", semReq(1))
		require.ErrorIs(t, err, fence.ErrInvalid, "empty owner")
		require.ErrorIs(t, b.ExtendPermit(ctx, "s", o, 0), fence.ErrInvalid, "ExtendPermit with no ttl")
		if migrate {
			var rows int
			require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM fencekit_leases_permits)
    + (SELECT count(*) FROM fencekit_leases_permit_holders) + (SELECT count(*) FROM fencekit_leases_permit_places)`).Scan(&rows))
			require.Zero(t, rows, "rows written by refused calls")
		}
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
	b := postgres.NewBackend(pool, opts)
	o := newOwner(t)
	_, err := b.Acquire(ctx, "l", o, time.Minute)
	require.NoError(t, err)
	_, err = b.AcquirePermit(ctx, "s", o, semReq(1))
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
	b := postgres.NewBackend(pool, nil)
	ops := []struct {
		name       string
		statements int64
		run        func(a, w string) error
	}{
		{"AcquirePermit (granted)", 2, func(a, _ string) error { _, err := b.AcquirePermit(ctx, "s", a, semReq(1)); return err }},
		{"AcquirePermit (same owner)", 2, func(a, _ string) error { _, err := b.AcquirePermit(ctx, "s", a, semReq(1)); return err }},
		{"AcquirePermit (refused)", 2, func(_, w string) error {
			_, err := b.AcquirePermit(ctx, "s", w, semReq(1))
			if !isHeld(err) {
				return err
			}
			return nil
		}},
		{"AcquirePermit (place kept)", 2, func(_, w string) error {
			_, err := b.AcquirePermit(ctx, "s", w, inLine(semReq(1), time.Second))
			if !isHeld(err) {
				return err
			}
			return nil
		}},
		{"ExtendPermit", 2, func(a, _ string) error { return b.ExtendPermit(ctx, "s", a, time.Minute) }},
		{"InspectPermits", 0, func(string, string) error { _, err := b.InspectPermits(ctx, "s"); return err }},
		{"LeavePermitLine", 2, func(_, w string) error { return b.LeavePermitLine(ctx, "s", w) }},
		{"ReleasePermit", 2, func(a, _ string) error { return b.ReleasePermit(ctx, "s", a) }},
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
	b := postgres.NewBackend(pool, nil)
	a, w := newOwner(t), newOwner(t)
	_, err := b.AcquirePermit(ctx, "seen", a, writeReq)
	require.NoError(t, err)
	_, err = b.AcquirePermit(ctx, "seen", w, inLine(writeReq, time.Minute))
	require.ErrorIs(t, err, lock.ErrHeld)

	_, err = pool.Exec(ctx, restoreSQL(t))
	require.NoError(t, err)
	floor := fence.Token(time.Now().Add(-time.Hour).UnixMicro())
	info, err := b.InspectPermits(ctx, "seen")
	require.NoError(t, err)
	require.Empty(t, info.Holders, "permits after the restore statement")
	require.Zero(t, info.Waiting, "places after the restore statement")
	for _, name := range []string{"seen", "never-seen"} {
		p, err := b.AcquirePermit(ctx, name, w, readReq)
		require.NoError(t, err, name)
		require.Greater(t, p.Token, floor, name)
		require.Greater(t, p.PriorWriter, floor, name+": prior writer")
		require.Greater(t, p.Token, p.PriorWriter, name)
	}
}
