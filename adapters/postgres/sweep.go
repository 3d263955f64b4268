package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
)

// The floor row of a lease table is the row named '' (no lock can have an
// empty name): its token is at least every token a swept row ever held, and
// Acquire starts a new row above it. Sweep never deletes it.

// sweepBatch bounds the rows one sweep transaction deletes, so that the
// table lock it holds (see Sweep) is short even on a large table.
const sweepBatch = 1000

// sweepStatements builds the statements of one sweep batch on table.
func sweepStatements(table string) (lockTable, sweep string) {
	// SHARE ROW EXCLUSIVE conflicts with the ROW EXCLUSIVE lock that every
	// Acquire, Extend and Release takes, and with itself, but not with
	// Inspect's ACCESS SHARE.
	lockTable = fmt.Sprintf(`LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE`, table)
	// A row is idle when it has been free for at least $1: released (owner
	// NULL, expires_at the release time; NULL if released before the
	// release time was kept) or expired (expires_at in the past). A held
	// row has expires_at in the future and never qualifies. The deleted
	// tokens raise the floor row in the same statement.
	sweep = fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[1]s WHERE name IN (
        SELECT name FROM %[1]s
        WHERE name <> '' AND coalesce(expires_at, '-infinity') <= statement_timestamp() - $1::interval
        LIMIT $2)
    RETURNING token
), floor AS (
    INSERT INTO %[1]s AS f (name, token)
    SELECT '', max(token) FROM gone HAVING count(*) > 0
    ON CONFLICT (name) DO UPDATE SET token = greatest(f.token, EXCLUDED.token)
)
SELECT count(*) FROM gone`, table)
	return lockTable, sweep
}

// Sweep deletes the lease rows of locks that have been free (released or
// expired) for at least idle by the database clock, and returns how many it
// deleted. Held locks, and locks freed less than idle ago, are kept.
//
// Tokens keep rising across a sweep: before a row goes, its token is
// recorded in one floor row per table (the row named "", which no lock can
// have), and a lock whose row is gone starts again above the floor, so
// above every token it was ever issued. Acquire reads the floor in its one
// statement; Extend, Release and Inspect do not touch it.
//
// Each batch of up to 1000 rows is one transaction that first locks the
// table in SHARE ROW EXCLUSIVE mode: it waits for the Acquire, Extend and
// Release statements in flight, and holds new ones back until it commits.
// That makes every Acquire see either the row or the raised floor, never
// neither (a statement whose snapshot predates the sweep could otherwise
// insert a new row from the old floor). Inspect is not blocked. Sweep
// repeats batches until none is full; ctx bounds the whole sweep, lock
// waits included.
//
// idle only decides how soon a free row may go (a lock re-acquired right
// after being swept costs a new row); safety does not depend on it. idle
// must be positive, else the error matches fence.ErrInvalid and nothing is
// deleted. Sweep never touches the Store table: see docs/postgres.md,
// "Bounded tables".
func (b *Backend) Sweep(ctx context.Context, idle time.Duration) (int, error) {
	if idle <= 0 {
		return 0, fence.Invalid("postgres: sweep: idle %v is not positive", idle)
	}
	if b.err != nil {
		return 0, b.err
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := b.sweepBatch(ctx, idle, sweepBatch)
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// sweepBatch deletes up to limit idle rows in one transaction of its own.
func (b *Backend) sweepBatch(ctx context.Context, idle time.Duration, limit int) (int, error) {
	conn, err := b.db.Acquire(ctx)
	if err != nil {
		return 0, wrapErr("sweep", err)
	}
	defer conn.Release()
	var n int
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		n, err = b.sweepIn(ctx, tx, idle, limit)
		return err
	})
	if err != nil {
		return 0, wrapErr("sweep", err)
	}
	return n, nil
}

// sweepIn runs one sweep batch inside tx, which must be a transaction (the
// table lock lasts until it ends).
func (b *Backend) sweepIn(ctx context.Context, tx pgx.Tx, idle time.Duration, limit int) (int, error) {
	if _, err := tx.Exec(ctx, b.lockTable); err != nil {
		return 0, err
	}
	var n int
	if err := tx.QueryRow(ctx, b.sweep, interval(idle), limit).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}
