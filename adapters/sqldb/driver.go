package sqldb

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

var _ driver.Backend = (*Backend)(nil)

// This file is the driver contract (lock/driver) over the Backend's tables:
// each method sends the request to the code of its shape (backend.go for
// locks, queue.go for a lock's line, multi.go for sets, resume.go,
// permit.go for semaphores and read-write locks), whose statements and
// round trips are those documented there. As the contract allows, nothing
// here checks its input again: the lock.Client did (driver.Validate). What
// is this adapter's own (a Dialect, table names that fit it) is still
// refused with fence.ErrInvalid before anything is sent.

// Acquire admits req.Owner as req asks: a lock, with or without a place in
// line, a set of locks, a resumed lease, or a permit.
//
// A lock without a place is one statement (and one more read, for the
// holder's TTL, when another owner holds it on MySQL). With a place, see
// queued waiting (queue.go): one statement on PostgreSQL; on MySQL one when
// the lock is taken, three when it is refused. A set is one transaction
// of len(Names)+2 statements that takes every name or none; it is always
// one step, never driver.ErrNotAtomic. A resume is one statement. A permit
// is one transaction that locks the permit name's row first (see
// permit.go).
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	switch {
	case req.Kind.Permit():
		return b.acquirePermit(ctx, req)
	case req.Names != nil:
		tokens, err := b.acquireSet(ctx, req.Names, req.Owner, req.TTL, req.Metadata)
		return driver.Grant{Tokens: tokens}, err
	case req.Resume:
		token, err := b.resume(ctx, req.Name, req.Owner, req.TTL)
		return driver.Grant{Token: token}, err
	case req.Place > 0:
		token, err := b.acquireInLine(ctx, req.Name, req.Owner, req.TTL, req.Place, req.Metadata)
		return driver.Grant{Token: token}, err
	default:
		token, err := b.acquireLock(ctx, req.Name, req.Owner, req.TTL, req.Metadata)
		return driver.Grant{Token: token}, err
	}
}

// Extend renews the claimed lease to ttl from now, one statement, keeping
// its token and metadata; it never re-creates a lease that expired or was
// released.
func (b *Backend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if c.Kind.Permit() {
		return b.extendPermit(ctx, c.Name, c.Owner, ttl)
	}
	return b.extendLock(ctx, c.Name, c.Owner, ttl)
}

// Release frees the claimed lease, one statement, keeping the name's
// token counter, and wakes the waiters in line through this Backend that
// it lets in; those of other processes find out at their next re-check.
func (b *Backend) Release(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.releasePermit(ctx, c.Name, c.Owner)
	}
	return b.releaseLock(ctx, c.Name, c.Owner)
}

// Await waits until the claim's owner may be let in, max has passed or ctx
// ends. database/sql has no push: a release through this Backend wakes its
// waiters at once, and a waiter re-checks the server for the rest, at most
// every MaxQueuePoll once first in line (see awaitTurn and awaitPermit).
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind.Permit() {
		return b.awaitPermit(ctx, c.Name, c.Owner, max)
	}
	return b.awaitTurn(ctx, c.Name, c.Owner, max)
}

// Leave gives up the claim's owner's place in line, one statement; nil when
// it has none.
func (b *Backend) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.leavePermitLine(ctx, c.Name, c.Owner)
	}
	return b.leaveQueue(ctx, c.Name, c.Owner)
}

// Inspect reports the lock (kind Exclusive) or the permit name called name,
// with its live holders and live places in line, as the database clock
// sees them: one read-only statement.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind.Permit() {
		return b.inspectPermits(ctx, name)
	}
	return b.inspectLock(ctx, name)
}
