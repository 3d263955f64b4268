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

// sweepSQL holds the statements of one sweep batch on a lease table.
type sweepSQL struct {
	candidates, lockTable, sweep string
}

// sweepStatements builds the statements of one sweep batch on table.
func sweepStatements(table string) sweepSQL {
	// A row is idle when it has been free for at least $1: released (owner
	// NULL, expires_at the release time; NULL if released before the
	// release time was kept) or expired (expires_at in the past). A held
	// row has expires_at in the future and never qualifies.
	const idle = `name <> '' AND coalesce(expires_at, '-infinity') <= statement_timestamp() - $1::interval`
	return sweepSQL{
		// Found before the table lock, so that the scan does not hold up
		// lock traffic.
		candidates: fmt.Sprintf(`SELECT name FROM %s WHERE %s LIMIT $2`, table, idle),
		// SHARE ROW EXCLUSIVE conflicts with the ROW EXCLUSIVE lock that
		// every Acquire, Extend and Release takes, and with itself, but
		// not with Inspect's ACCESS SHARE.
		lockTable: fmt.Sprintf(`LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE`, table),
		// Idleness is checked again under the lock, by primary key; the
		// deleted tokens raise the floor row in the same statement.
		sweep: fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[1]s
    WHERE name = ANY ($2::text[])
      AND %[2]s
    RETURNING token
), floor AS (
    INSERT INTO %[1]s AS f (name, token)
    SELECT '', max(token) FROM gone HAVING count(*) > 0
    ON CONFLICT (name) DO UPDATE SET token = greatest(f.token, EXCLUDED.token)
)
SELECT count(*) FROM gone`, table, idle),
	}
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
// Each batch of up to 1000 rows is one transaction: it finds idle rows,
// locks the table in SHARE ROW EXCLUSIVE mode, and deletes those rows that
// are still idle. The lock waits for the Acquire, Extend and Release
// statements in flight, and holds new ones back until the batch commits.
// That makes every Acquire see either the row or the raised floor, never
// neither (a statement whose snapshot predates the sweep could otherwise
// insert a new row from the old floor). Inspect is not blocked, and a
// sweep that finds nothing takes no lock. Sweep repeats batches until one
// finds fewer than 1000 rows; ctx bounds the whole sweep, lock waits
// included.
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
		n, full, err := b.sweepBatch(ctx, idle, sweepBatch)
		total += n
		if err != nil || !full {
			return total, err
		}
	}
}

// sweepBatch deletes up to limit idle rows in one transaction of its own,
// and reports whether it found limit candidates (more may be waiting).
func (b *Backend) sweepBatch(ctx context.Context, idle time.Duration, limit int) (n int, full bool, err error) {
	conn, err := b.db.Acquire(ctx)
	if err != nil {
		return 0, false, wrapErr("sweep", err)
	}
	defer conn.Release()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		n, full, err = b.sweepIn(ctx, tx, idle, limit)
		return err
	})
	if err != nil {
		return 0, false, wrapTableErr(b.table, fixMigrate, "sweep", err)
	}
	return n, full, nil
}

// sweepIn runs one sweep batch inside tx, which must be a transaction (the
// table lock lasts until it ends).
func (b *Backend) sweepIn(ctx context.Context, tx pgx.Tx, idle time.Duration, limit int) (n int, full bool, err error) {
	rows, err := tx.Query(ctx, b.sweepSQL.candidates, interval(idle), limit)
	if err != nil {
		return 0, false, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		return 0, false, err
	}
	if _, err := tx.Exec(ctx, b.sweepSQL.lockTable); err != nil {
		return 0, false, err
	}
	if err := tx.QueryRow(ctx, b.sweepSQL.sweep, interval(idle), names).Scan(&n); err != nil {
		return 0, false, err
	}
	return n, len(names) == limit, nil
}
