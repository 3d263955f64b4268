package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// resumePostgres renews owner's live lease and returns its token: the
// extend statement with RETURNING.
const resumePostgres = `UPDATE %s SET expires_at = statement_timestamp() + $1 * interval '1 microsecond'
WHERE name = $2 AND owner = $3 AND expires_at > statement_timestamp()
RETURNING token`

// resume is an Acquire with Request.Resume: it renews owner's live lease on
// name to ttl from now and returns its token, in one statement, keeping the
// row's token and metadata. On MySQL and MariaDB it is extendLock's
// statement, whose reply carries the token (token = LAST_INSERT_ID(token),
// evaluated only for the matched row, so 0 means not held whatever the
// affected-rows setting); on PostgreSQL, UPDATE ... RETURNING token. When
// owner does not hold name it returns an error matching driver.ErrNotHeld
// and changes nothing: it never re-creates a lease and never mints a
// token. A serialization conflict is retried as extendLock's is.
func (b *Backend) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	where := fmt.Sprintf("resume %q", name)
	for attempt := 1; ; attempt++ {
		tok, err := b.resumeOnce(ctx, name, owner, ttl.Microseconds())
		switch {
		case err != nil && isConflict(err) && attempt < 3 && ctx.Err() == nil:
			continue // the statement was undone whole: run it again
		case err != nil:
			return 0, classify(ctx, b.d, b.table, fixMigrate, where, err)
		case tok == 0:
			return 0, fmt.Errorf("sqldb: %s: %w", where, driver.ErrNotHeld)
		}
		return tok, nil
	}
}

// resumeOnce runs the resume statement once: the token, or 0 when owner
// does not hold name.
func (b *Backend) resumeOnce(ctx context.Context, name, owner string, micros int64) (fence.Token, error) {
	if b.d == MySQL {
		res, err := b.db.ExecContext(ctx, b.extend, micros, name, owner)
		if err != nil {
			return 0, err
		}
		id, err := res.LastInsertId()
		return fence.Token(id), err
	}
	var token int64
	err := b.db.QueryRowContext(ctx, fmt.Sprintf(resumePostgres, b.table), micros, name, owner).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return fence.Token(token), err
}
