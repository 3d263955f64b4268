package postgres

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

var _ driver.Backend = (*Backend)(nil)

// This file is the driver contract (lock/driver) over the lease table and
// the tables beside it: each method sends the request to the code of its
// shape, which sends the statements it always has (backend.go for locks,
// queue.go for places in line, multi.go for sets, resume.go, permit.go for
// semaphores and read-write locks), so each operation costs the round trips
// it did. As the contract allows, nothing here checks its input again: the
// lock.Client did (driver.Validate).

// Acquire admits req.Owner as req asks: a lock, with or without a place in
// line, a set of locks, a resumed lease, or a permit. req.Metadata goes to
// the lease row of an exclusive lock (for a set, to each of its rows);
// permits keep none.
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

// Extend renews the claimed lease (a lock, or a permit of any kind) to ttl
// from now.
func (b *Backend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if c.Kind.Permit() {
		return b.extendPermit(ctx, c.Name, c.Owner, ttl)
	}
	return b.extendLock(ctx, c.Name, c.Owner, ttl)
}

// Release frees the claimed lease and wakes the waiters it lets in.
func (b *Backend) Release(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.releasePermit(ctx, c.Name, c.Owner)
	}
	return b.releaseLock(ctx, c.Name, c.Owner)
}

// Await blocks until the claim's owner is woken in line (a NOTIFY on
// WakeChannel), max has passed or ctx ends.
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind.Permit() {
		return b.awaitPermit(ctx, c.Name, c.Owner, max)
	}
	return b.awaitTurn(ctx, c.Name, c.Owner, max)
}

// Leave removes the claim's owner's place in line, waking those its going
// lets in.
func (b *Backend) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.leavePermitLine(ctx, c.Name, c.Owner)
	}
	return b.leaveQueue(ctx, c.Name, c.Owner)
}

// Inspect reports the lock (kind Exclusive) or the permit name called
// name, as the database clock sees it, in one statement.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind.Permit() {
		return b.inspectPermits(ctx, name)
	}
	return b.inspectLock(ctx, name)
}
