package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Waiters returns, for each of names in order, how many waiters stand in
// its queue now: the places in line of a lock (kept by Backend.Acquire
// with a Request.Place) that have not expired by the database clock. One statement for all names. It reads the
// queue table that Migrate creates beside the lease table; before Migrate
// has created it, the error matches ErrNotMigrated.
func (a *Admin) Waiters(ctx context.Context, names []string) ([]int64, error) {
	if a.err != nil {
		return nil, a.err
	}
	if len(names) == 0 {
		return nil, ctx.Err()
	}
	rows, err := a.db.Query(ctx, a.waiters, names)
	if err != nil {
		return nil, wrapTableErr(a.queue, fixMigrate, "waiters", err)
	}
	counts, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, wrapTableErr(a.queue, fixMigrate, "waiters", err)
	}
	return counts, nil
}
