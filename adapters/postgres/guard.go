package postgres

import (
	"context"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Guard fences a caller's own transaction, whatever tables it writes. Call
// Check inside the transaction with the lease's token before committing
// (best: first). Check raises the resource's fence in the store table and
// keeps that row locked until the transaction ends, so a holder with an
// older token is refused, and a newer holder's Check waits until this
// transaction has committed or rolled back.
//
// Resources are rows of the store table (Options.StoreTable), so they share
// the key space and fences of a Store on the same table: Check(resource, t)
// is Store.Advance(resource, t) run inside the transaction.
type Guard struct {
	f *fencer
}

// NewGuard returns a Guard on the store table named in opts (nil for the
// default fencekit_store; see Migrate).
func NewGuard(opts *Options) *Guard { return &Guard{f: newFencer(opts)} }

// Check raises resource's fence to token inside tx, and holds the row lock
// until tx ends. When token is older than the fence it returns a
// *fence.StaleError (matching fence.ErrStale) and changes nothing: roll tx
// back, since another holder has taken over. Under REPEATABLE READ or
// SERIALIZABLE a concurrent Check can make it fail with a *ConflictError
// instead; roll back and retry then too.
//
// tx should be a transaction (pgx.Tx): on a pool or a connection outside a
// transaction, the fence is raised but no lock outlives the call.
//
// A stale refusal is also reported to the Observer of the lease that ctx
// carries (the context of lock.Client.Do, Lead or lock.WithLease, or
// lock.ContextWithLease), to its lock.Observer.Stale for resource.
func (g *Guard) Check(ctx context.Context, tx DB, resource string, token fence.Token) error {
	if tx == nil {
		return fence.Invalid("postgres: guard check: nil transaction")
	}
	return lock.ReportStale(ctx, resource, g.f.write(ctx, tx, "guard check", g.f.adv, resource, token, nil))
}
