package sqldb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// acquireSet takes every lock in names for owner for ttl in one
// transaction, or none of them, storing md on each. The transaction runs at
// the server's default isolation level and sends acquireLock's own
// statement once per name, in sorted name order: each takes a free or
// expired lock with a new token (one above the row's, or above the floor
// row for a new name), or extends owner's live lease with its token, and
// locks the row until the transaction ends. The first name that another
// owner holds ends it: the transaction is rolled back, so no row changed
// and no token was consumed, and the error is a *driver.HeldError for that
// name with its remaining TTL. Tokens come back in the order of names. A
// set is always one step here: it never returns driver.ErrNotAtomic.
//
// Each statement reads and locks the newest version of its row, whatever
// the isolation level's snapshot; the floor row a new name starts from
// changes only under Sweep's and Admin.Bump's table lock, which waits for
// the transaction to end.
//
// The sorted order means that two sets that overlap lock their common rows
// in the same order; a deadlock or serialization failure the server reports
// anyway runs the transaction again (three attempts), then comes back as a
// *ConflictError that driver.Retryable accepts. A single-name acquire of
// one of the names waits while the transaction holds its row, so nobody
// sees a part of the set taken. It costs len(names)+2 statements (BEGIN,
// one per name, COMMIT), and one more to read the holder's TTL when a name
// is busy on MySQL. Like acquireLock, it does not look at the queue of
// queued waiting.
func (b *Backend) acquireSet(ctx context.Context, names []string, owner string, ttl time.Duration, md string) ([]fence.Token, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The positions of names in sorted order, so that the rows are locked
	// in one order whatever order the caller gave.
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return cmp.Compare(names[i], names[j]) })
	where := fmt.Sprintf("acquire %q", names)
	for attempt := 1; ; attempt++ {
		tokens, err := b.acquireSetOnce(ctx, names, order, owner, ttl, md)
		switch {
		case err != nil && isConflict(err) && attempt < 3 && ctx.Err() == nil:
			continue // the transaction was rolled back whole: run it again
		case err != nil:
			var held *driver.HeldError
			if errors.As(err, &held) {
				return nil, err
			}
			return nil, classify(ctx, b.d, b.table, fixMigrate, where, err)
		}
		return tokens, nil
	}
}

// acquireSetOnce runs acquireSet's transaction once. Its errors are the
// driver's, unwrapped, or a *driver.HeldError.
func (b *Backend) acquireSetOnce(ctx context.Context, names []string, order []int, owner string, ttl time.Duration, md string) (tokens []fence.Token, err error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// Best effort: database/sql rolls the transaction back itself
			// when ctx ends, and a broken connection ends it on the server.
			_ = tx.Rollback()
		}
	}()
	tokens = make([]fence.Token, len(names))
	for _, i := range order {
		token, heldFor, err := b.tryAcquire(ctx, tx, names[i], owner, ttl, md)
		if err != nil {
			return nil, err
		}
		if token == 0 {
			if heldFor <= 0 {
				// MySQL's statement does not say, nor PostgreSQL's when the
				// holder committed after its snapshot. The statement locked
				// the row, so a locking read (the newest version, not
				// REPEATABLE READ's snapshot) gives the holder's TTL as it
				// stands, without waiting.
				row, err := b.lookupOn(ctx, tx, b.lookup+" FOR UPDATE", names[i])
				if err != nil {
					return nil, err
				}
				heldFor = row.ttl
			}
			return nil, &driver.HeldError{Name: names[i], TTL: heldFor}
		}
		tokens[i] = token
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return tokens, nil
}
