package etcd

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

var _ driver.Backend = (*Backend)(nil)

// This file is the driver contract (lock/driver) over the adapter's
// transactions: each method checks its context and sends the request to the
// code of its shape (backend.go for locks, queue.go for a place in a lock's
// line, multi.go for sets, resume.go, permitacquire.go and permit.go for
// semaphores and read-write locks), whose requests per call are what their
// doc comments say. As the contract allows, nothing here checks its input
// again: the lock.Client did (driver.Validate). Any valid name and owner is
// safe in a key (keyEscaper).

// Acquire admits req.Owner as req asks: a lock, with or without a place in
// line, a set of locks, a resumed lease, or a permit.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	switch {
	case req.Kind.Permit():
		return b.acquirePermit(ctx, req)
	case req.Names != nil:
		return grantAgain(ctx, func() (driver.Grant, error) {
			tokens, err := b.acquireSet(ctx, req.Names, req.Owner, req.Metadata, req.TTL)
			return driver.Grant{Tokens: tokens}, err
		})
	case req.Resume:
		return tokenGrant(ctx, func() (fence.Token, error) { return b.resume(ctx, req.Name, req.Owner, req.TTL) })
	case req.Place > 0:
		return tokenGrant(ctx, func() (fence.Token, error) {
			return b.acquireInLine(ctx, req.Name, req.Owner, req.Metadata, req.TTL, req.Place)
		})
	default:
		return tokenGrant(ctx, func() (fence.Token, error) {
			return b.acquireLock(ctx, req.Name, req.Owner, req.Metadata, req.TTL)
		})
	}
}

// grantAgain runs an acquisition that grants an etcd lease and then uses it
// in a Txn, up to three times while the Txn fails because the lease lapsed
// between its grant and the Txn (a client stalled for its whole TTL): the
// Txn then failed whole, nothing was written, and a new grant may be in
// time.
func grantAgain(ctx context.Context, try func() (driver.Grant, error)) (driver.Grant, error) {
	for attempt := 1; ; attempt++ {
		g, err := try()
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) || attempt == 3 || ctx.Err() != nil {
			return g, err
		}
	}
}

// tokenGrant is grantAgain for an acquisition of one name.
func tokenGrant(ctx context.Context, try func() (fence.Token, error)) (driver.Grant, error) {
	return grantAgain(ctx, func() (driver.Grant, error) {
		token, err := try()
		return driver.Grant{Token: token}, err
	})
}

// Extend renews the claimed lease for ttl from now.
func (b *Backend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.extendPermit(ctx, c.Name, c.Owner, ttl)
	}
	return b.extendLock(ctx, c.Name, c.Owner, ttl)
}

// Release frees the claimed lease. Its deletion wakes the waiters, through
// their watches.
func (b *Backend) Release(ctx context.Context, c driver.Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.releasePermit(ctx, c.Name, c.Owner)
	}
	return b.releaseLock(ctx, c.Name, c.Owner)
}

// Await waits, on a watch, until the key that the claim's owner waits for
// in line is deleted, max has passed, or ctx ends (see awaitTurn and
// awaitPermit). It returns at once when the owner has no place in line.
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.awaitPermit(ctx, c.Name, c.Owner, max)
	}
	return b.awaitTurn(ctx, c.Name, c.Owner, max)
}

// Leave deletes the claim's owner's place in line, which wakes the waiter
// behind it.
func (b *Backend) Leave(ctx context.Context, c driver.Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.leavePermitLine(ctx, c.Name, c.Owner)
	}
	return b.leaveQueue(ctx, c.Name, c.Owner)
}

// Inspect reports the lock (kind Exclusive) or the permit name called name,
// with the places in its line.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	if kind.Permit() {
		return b.inspectPermits(ctx, name)
	}
	return b.inspectLock(ctx, name)
}
