package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SweepInForTest runs one sweep batch of b inside the caller's transaction,
// so that a test can hold the sweep open while other statements run.
func SweepInForTest(ctx context.Context, b *Backend, tx pgx.Tx, idle time.Duration) (int, error) {
	n, _, err := b.sweepIn(ctx, tx, idle, sweepBatch)
	return n, err
}

// SweepSQLForTest returns the statement of a sweep batch on the default
// lease table.
func SweepSQLForTest() string {
	return sweepStatements(pgx.Identifier{DefaultLeaseTable}.Sanitize()).sweep
}
