package sqldb

import (
	"context"
	"database/sql"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Guard fences a caller's own transaction (a *sql.Tx from database/sql,
// GORM, sqlx or ent), whatever tables it writes. Call Check inside the
// transaction with the lease's token, first, before the transaction reads
// what it will write. Check raises the resource's fence in the store table
// and keeps that row locked until the transaction ends, so a holder with an
// older token is refused, and a newer holder's Check waits until this
// transaction has committed or rolled back.
//
// Resources are rows of the store table (Options.StoreTable), so they share
// the key space and fences of a Store on the same table: Check(resource, t)
// is Store.Advance(resource, t) run inside the transaction.
type Guard struct {
	f    *fencer
	rows heldRows // MySQL: the resources each live transaction has fenced
}

// NewGuard returns a Guard in dialect d on the store table named in opts
// (nil for the default fencekit_store; see Migrate). An unknown dialect or
// a malformed table name is reported by Check as an error matching
// fence.ErrInvalid.
func NewGuard(d Dialect, opts *Options) *Guard { return &Guard{f: newFencer(d, opts)} }

// Check raises resource's fence to token inside tx, and holds the row lock
// until tx ends. When token is older than the fence it returns a
// *fence.StaleError (matching fence.ErrStale), reported to the Observer of
// the lease ctx carries (lock.ContextWithLease; Do's context carries its
// own), and changes nothing: roll tx back, since another holder has taken
// over. When the server ends the
// statement because of a concurrent transaction (a deadlock or a lock wait
// timeout on MySQL, a serialization failure or deadlock on PostgreSQL) it
// returns a *ConflictError matching ErrConflict, never a silent success:
// roll back and retry the whole transaction.
//
// On MySQL the statement that raises the fence runs under a named lock of
// the server's (GET_LOCK) for the resource, taken just before it and
// released just after it, so that at most one transaction at a time waits
// in InnoDB for the resource's row. When the first Check of a resource that
// had no row yet rolls back, InnoDB turns the row locks that the
// transactions queued on its insert were waiting for into gap locks, and
// two of them would then deadlock inserting the row; with one waiter there
// is no one to deadlock with (TestGuardMissingKeyRollback). That costs two
// short statements more per Check. The named lock is the session's, not the
// transaction's: it is held only while the statement runs. A second Check
// of a resource in a transaction whose first Check of it succeeded already
// holds the row, and runs without the named lock
// (TestGuardCheckTwiceInOneTransaction).
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, resource string, token fence.Token) error {
	if tx == nil {
		return fence.Invalid("sqldb: guard check: nil transaction")
	}
	raise := func() error { return g.f.write(ctx, tx, false, "guard check", g.f.adv, resource, token, nil) }
	var err error
	if g.needsNamedLock(ctx, tx, resource, token) {
		if err = g.f.oneWaiter(ctx, tx, resource, raise); err == nil {
			g.rows.add(tx, resource)
		}
	} else {
		err = raise() // also reports bad input and an ended ctx
	}
	// A refusal reaches the Observer of the lease in ctx, if any, as
	// Lease.Fenced's do.
	return lock.ReportStale(ctx, resource, err)
}

// needsNamedLock reports whether Check runs its statement under the
// resource's named lock: on MySQL, for valid input, unless tx already
// holds the resource's row.
func (g *Guard) needsNamedLock(ctx context.Context, tx *sql.Tx, resource string, token fence.Token) bool {
	return g.f.d == MySQL && g.f.err == nil && fence.ValidateWrite(resource, token) == nil &&
		ctx.Err() == nil && !g.rows.holds(tx, resource)
}
