package sqldb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

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
	f *fencer
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
// transaction's: it is held only while the statement runs. Check a resource
// once per transaction: a second Check of a resource that tx already
// fenced, while another transaction waits for it, waits for that
// transaction's lock wait timeout (innodb_lock_wait_timeout), one of them
// then getting ErrConflict.
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, resource string, token fence.Token) error {
	if tx == nil {
		return fence.Invalid("sqldb: guard check: nil transaction")
	}
	check := func() error { return g.f.write(ctx, tx, false, "guard check", g.f.adv, resource, token, nil) }
	if g.f.d == MySQL && g.f.err == nil && fence.ValidateWrite(resource, token) == nil && ctx.Err() == nil {
		inner := check
		check = func() error { return g.f.oneWaiter(ctx, tx, resource, inner) }
	}
	// A refusal reaches the Observer of the lease in ctx, if any, as
	// Lease.Fenced's do.
	return lock.ReportStale(ctx, resource, check())
}

// oneWaiter runs f, a statement on key's row in tx, under the MySQL named
// lock for the row (see Guard.Check), waiting for it at most
// innodb_lock_wait_timeout seconds.
func (f *fencer) oneWaiter(ctx context.Context, tx *sql.Tx, key string, run func() error) error {
	name := f.lockName(key)
	var got sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT GET_LOCK(?, @@innodb_lock_wait_timeout)", name).Scan(&got); err != nil {
		return classify(ctx, f.d, f.table, fixMigrate, fmt.Sprintf("guard check %q: named lock", key), err)
	}
	if !got.Valid || got.Int64 != 1 {
		return lock.Transient(&ConflictError{Op: fmt.Sprintf("guard check %q", key), Err: errors.New("timed out waiting for the resource's named lock (GET_LOCK)")})
	}
	err := run()
	// Released even when ctx has ended: the lock is the session's, and
	// the connection goes back to the pool.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, rerr := tx.ExecContext(rctx, "DO RELEASE_LOCK(?)", name); rerr != nil && err == nil {
		// The lock stays until the connection closes: fail the
		// transaction rather than return its connection to the pool.
		err = classify(ctx, f.d, f.table, fixMigrate, fmt.Sprintf("guard check %q: release the named lock", key), rerr)
	}
	return err
}

// releaseTimeout bounds the RELEASE_LOCK that follows a Check.
const releaseTimeout = 10 * time.Second

// lockName is the MySQL named lock of key's row in the store table: a
// digest, since names are limited to 64 characters.
func (f *fencer) lockName(key string) string {
	h := sha256.New()
	h.Write([]byte(f.table))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "fencekit:" + hex.EncodeToString(h.Sum(nil))[:48]
}
