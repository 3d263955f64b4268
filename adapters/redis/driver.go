package redis

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

var _ driver.Backend = (*Backend)(nil)

// This file is the driver contract (lock/driver) over the adapter's
// scripts: each method sends the request to the code of its shape
// (backend.go and queue.go for locks, multi.go for sets, resume.go,
// permit.go for semaphores and read-write locks), each of which is one
// script and one round trip. As the contract allows, nothing here checks
// its input again: the lock.Client did (driver.Validate), and the scripts
// rely on it (an owner never contains NUL, which joins it to a wake-up
// channel in a queue entry). Any valid name is safe in a key (keyEscaper).

// Acquire admits req.Owner as req asks: a lock, with or without a place in
// line, a set of locks, a resumed lease, or a permit.
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

// Extend renews the claimed lease for ttl from now.
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

// Await waits until the claim's owner is woken (a release, a leave or an
// expiry that lets it in, published on WakeChannel), max has passed, or ctx
// ends. The first wait through this Backend subscribes to its channel and
// returns as soon as the subscription is confirmed, so that the caller asks
// again and misses no wake-up that came before it. Without pub/sub (a
// Client that cannot Subscribe) it waits max.
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	key := b.LeaseKey(c.Name)
	if c.Kind.Permit() {
		key = b.PermitKeys(c.Name)[0]
	}
	return b.waker.await(ctx, mailbox(key, c.Owner), max)
}

// Leave removes the claim's owner's place in line, waking those it lets in.
func (b *Backend) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.leavePermitLine(ctx, c.Name, c.Owner)
	}
	return b.leaveQueue(ctx, c.Name, c.Owner)
}

// Inspect reports the lock (kind Exclusive) or the permit name called name,
// with the live places in its line: one script, one round trip.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind.Permit() {
		return b.inspectPermits(ctx, name)
	}
	return b.inspectLock(ctx, name)
}
