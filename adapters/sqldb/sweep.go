package sqldb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// The floor row of a lease table is the row named '' (no lock can have an
// empty name): its token is at least every token a swept row ever held, and
// Acquire starts a new row above it. Sweep never deletes it. On PostgreSQL
// it is the floor row of adapters/postgres, so the two adapters can share
// and sweep one table.

// sweepBatch bounds the rows one sweep transaction deletes, so that the
// table lock it holds (see Sweep) is short even on a large table.
const sweepBatch = 1000

// idleSQL is the condition on a row free for at least the microseconds of
// parameter idle: released (owner NULL, expires_at the release time) or
// expired (expires_at in the past). A held row has expires_at in the
// future and never qualifies; neither does the floor row.
func idleSQL(d Dialect, idle string) string {
	if d == MySQL {
		return fmt.Sprintf("`name` <> '' AND `expires_at` IS NOT NULL AND `expires_at` <= UTC_TIMESTAMP(6) - INTERVAL %s MICROSECOND", idle)
	}
	return fmt.Sprintf(`name <> '' AND coalesce(expires_at, '-infinity') <= statement_timestamp() - %s * interval '1 microsecond'`, idle)
}

// Sweep deletes the lease rows of locks that have been free (released or
// expired) for at least idle by the database clock, and returns how many it
// deleted. Held locks, and locks freed less than idle ago, are kept.
//
// Tokens keep rising across a sweep: before a row goes, its token is
// recorded in one floor row per table (the row named "", which no lock can
// have), and a lock whose row is gone starts again above the floor, so
// above every token it was ever issued.
//
// Each batch of up to 1000 rows is one transaction that holds the table
// locked: LOCK TABLE ... IN SHARE ROW EXCLUSIVE MODE on PostgreSQL (as
// postgres.Backend.Sweep), LOCK TABLES ... WRITE with autocommit off on
// MySQL (the session needs the LOCK TABLES privilege). The lock waits for
// the Acquire, Extend and Release statements in flight and holds new ones
// back until the batch commits, so every Acquire sees either the row or the
// raised floor, never neither. A sweep that finds nothing takes no lock.
// Sweep repeats batches until one finds fewer than 1000 rows; ctx bounds
// the whole sweep, lock waits included.
//
// idle only decides how soon a free row may go (a lock re-acquired right
// after being swept costs a new row); safety does not depend on it. idle
// must be positive, else the error matches fence.ErrInvalid and nothing is
// deleted. Sweep never touches the Store table.
func (b *Backend) Sweep(ctx context.Context, idle time.Duration) (int, error) {
	if idle <= 0 {
		return 0, fence.Invalid("sqldb: sweep: idle %v is not positive", idle)
	}
	if b.err != nil {
		return 0, b.err
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, full, err := b.sweepBatch(ctx, idle.Microseconds(), sweepBatch)
		total += n
		if err != nil {
			return total, classify(ctx, b.d, b.table, fixMigrate, "sweep", err)
		}
		if !full {
			return total, nil
		}
	}
}

// sweepBatch deletes up to limit idle rows in one transaction of its own,
// and reports whether it found limit of them (more may be waiting).
func (b *Backend) sweepBatch(ctx context.Context, micros int64, limit int) (n int, full bool, err error) {
	// Found before the table lock, so that a sweep with nothing to do
	// does not hold up lock traffic.
	p := &params{d: b.d}
	probe := fmt.Sprintf("SELECT COUNT(*) FROM (SELECT 1 AS one FROM %s WHERE %s LIMIT 1) AS c", b.table, idleSQL(b.d, p.add(micros)))
	var found int
	if err := b.db.QueryRowContext(ctx, probe, p.args...).Scan(&found); err != nil || found == 0 {
		return 0, false, err
	}
	err = withTableLock(ctx, b.db, b.d, b.table, func(q querier) error {
		var err error
		if b.d == MySQL {
			n, err = b.sweepMySQL(ctx, q, micros, limit)
		} else {
			n, err = b.sweepPostgreSQL(ctx, q, micros, limit)
		}
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return n, n == limit, nil
}

// sweepPostgreSQL deletes the idle rows and raises the floor in one
// statement, under the table lock, as adapters/postgres does.
func (b *Backend) sweepPostgreSQL(ctx context.Context, q querier, micros int64, limit int) (int, error) {
	stmt := fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[1]s
    WHERE name IN (SELECT name FROM %[1]s WHERE %[2]s LIMIT $2)
      AND %[2]s
    RETURNING token
), floor AS (
    INSERT INTO %[1]s AS f (name, token)
    SELECT '', max(token) FROM gone HAVING count(*) > 0
    ON CONFLICT (name) DO UPDATE SET token = greatest(f.token, EXCLUDED.token)
)
SELECT count(*) FROM gone`, b.table, idleSQL(PostgreSQL, "$1"))
	var n int
	err := q.QueryRowContext(ctx, stmt, micros, limit).Scan(&n)
	return n, err
}

// sweepMySQL reads the idle rows under the table lock, raises the floor to
// their highest token, and deletes exactly those rows; the COMMIT that
// withTableLock sends makes the two changes one.
func (b *Backend) sweepMySQL(ctx context.Context, q querier, micros int64, limit int) (int, error) {
	rows, err := q.QueryContext(ctx, fmt.Sprintf("SELECT `name`, `token` FROM %s WHERE %s ORDER BY `name` LIMIT ?", b.table, idleSQL(MySQL, "?")), micros, limit)
	if err != nil {
		return 0, err
	}
	var (
		names []any
		top   int64
	)
	for rows.Next() {
		var (
			name  string
			token int64
		)
		if err := rows.Scan(&name, &token); err != nil {
			rows.Close()
			return 0, err
		}
		names, top = append(names, name), max(top, token)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(names) == 0 {
		return 0, nil
	}
	floor := fmt.Sprintf("INSERT INTO %s (`name`, `token`) VALUES ('', ?) ON DUPLICATE KEY UPDATE `token` = GREATEST(`token`, VALUES(`token`))", b.table)
	if _, err := q.ExecContext(ctx, floor, top); err != nil {
		return 0, err
	}
	del := fmt.Sprintf("DELETE FROM %s WHERE `name` IN (?%s)", b.table, strings.Repeat(", ?", len(names)-1))
	if _, err := q.ExecContext(ctx, del, names...); err != nil {
		return 0, err
	}
	return len(names), nil
}
