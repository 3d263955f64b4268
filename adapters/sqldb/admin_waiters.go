package sqldb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Waiters returns, for each of names in order, how many waiters stand in
// its queue now: the places that Backend.Acquire keeps for requests with a
// Place, that have not expired by the database clock. One statement for all names (the names go
// in as parameters; only their count shapes the statement). It reads the
// queue table that Migrate creates beside the lease table; before Migrate
// has created it, the error matches ErrNotMigrated.
func (a *Admin) Waiters(ctx context.Context, names []string) ([]int64, error) {
	if a.err != nil {
		return nil, a.err
	}
	if len(names) == 0 {
		return nil, ctx.Err()
	}
	marks := make([]string, len(names))
	args := make([]any, len(names))
	for i, n := range names {
		marks[i] = "$" + strconv.Itoa(i+1)
		if a.d == MySQL {
			marks[i] = "?"
		}
		args[i] = n
	}
	q := fmt.Sprintf("SELECT name, count(*) FROM %s WHERE expires_at > clock_timestamp() AND name IN (%s) GROUP BY name",
		a.queue, strings.Join(marks, ", "))
	if a.d == MySQL {
		q = fmt.Sprintf("SELECT `name`, COUNT(*) FROM %s WHERE `expires_at` > UTC_TIMESTAMP(6) AND `name` IN (%s) GROUP BY `name`",
			a.queue, strings.Join(marks, ", "))
	}
	rows, err := a.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(ctx, a.d, a.queue, fixMigrate, "waiters", err)
	}
	defer rows.Close()
	byName := make(map[string]int64, len(names))
	for rows.Next() {
		var (
			name []byte // VARBINARY on MySQL
			n    int64
		)
		if err := rows.Scan(&name, &n); err != nil {
			return nil, classify(ctx, a.d, a.queue, fixMigrate, "waiters", err)
		}
		byName[string(name)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, classify(ctx, a.d, a.queue, fixMigrate, "waiters", err)
	}
	counts := make([]int64, len(names))
	for i, n := range names {
		counts[i] = byName[n]
	}
	return counts, nil
}
