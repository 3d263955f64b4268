package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// resumeSQL renews owner's live lease and returns its token: Extend's
// statement with RETURNING, so the owner check, the renewal and the token
// read are one statement. Under READ COMMITTED an UPDATE re-checks its
// WHERE on the newest version of the row it locks, so a release or a new
// holder committed meanwhile is seen.
const resumeSQL = `UPDATE %s SET expires_at = statement_timestamp() + $3::interval
WHERE name = $1 AND owner = $2 AND expires_at > statement_timestamp()
RETURNING token`

// resume (Acquire with Resume) renews owner's live lease on name to ttl
// from now and returns its token, in one statement, keeping the row's token
// and metadata. When owner does not hold name (released, expired, another
// holder, no row) it returns an error matching driver.ErrNotHeld and
// changes nothing: it never re-creates a lease and never mints a token.
func (b *Backend) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var token int64
	err := b.db.QueryRow(ctx, fmt.Sprintf(resumeSQL, b.table), name, owner, interval(ttl)).Scan(&token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("postgres: resume %q: %w", name, driver.ErrNotHeld)
	case err != nil:
		return 0, wrapTableErr(b.table, fixMigrate, fmt.Sprintf("resume %q", name), err)
	}
	return fence.Token(token), nil
}
