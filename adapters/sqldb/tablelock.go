package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math"
	"time"
)

// withTableLock runs f in one transaction that holds the lease table
// locked against every Acquire, Extend and Release, so that a sweep or a
// bump and the lock traffic never interleave (an Acquire sees either the
// rows before or the rows and floor after, never a mix).
//
// PostgreSQL: LOCK TABLE ... IN SHARE ROW EXCLUSIVE MODE, as
// adapters/postgres takes it (Inspect and List still read).
//
// MySQL: LOCK TABLES ... WRITE inside a transaction opened with autocommit
// off, the way the MySQL manual prescribes for InnoDB; the connection is
// pinned, and lock_wait_timeout is bounded by ctx's deadline so that a
// lock request abandoned by a cancelled ctx does not stay queued on the
// server, holding up lock traffic behind it. Needs the LOCK TABLES
// privilege. On an error the connection is discarded, which rolls back
// and unlocks on the server.
func withTableLock(ctx context.Context, db *sql.DB, d Dialect, table string, f func(q querier) error) error {
	if d == PostgreSQL {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE", table)); err != nil {
			return err
		}
		if err := f(tx); err != nil {
			return err
		}
		return tx.Commit()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stmts := []string{"SET SESSION autocommit = 0"}
	if deadline, ok := ctx.Deadline(); ok {
		secs := math.Ceil(time.Until(deadline).Seconds())
		stmts = append(stmts, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int64(max(secs, 1))))
	}
	stmts = append(stmts, fmt.Sprintf("LOCK TABLES %s WRITE", table))
	err = func() error {
		for _, s := range stmts {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		if err := f(conn); err != nil {
			return err
		}
		for _, s := range []string{"COMMIT", "UNLOCK TABLES", "SET SESSION autocommit = 1", "SET SESSION lock_wait_timeout = DEFAULT"} {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		// Closing the server session is the one undo that always works,
		// whatever state the statements left it in.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return err
}

// querier is a *sql.Tx or a *sql.Conn.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var _, _ querier = (*sql.Tx)(nil), (*sql.Conn)(nil)
