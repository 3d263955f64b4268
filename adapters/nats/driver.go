package nats

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

var _ driver.Backend = (*Backend)(nil)

// This file is the driver contract (lock/driver) over the adapter's KV
// reads and conditional writes: each method checks its context and sends
// the request to the code of its shape (backend.go for locks, queue.go for
// a place in a lock's line, resume.go, permit.go and permitwait.go for
// semaphores and read-write locks), whose round trips per call are what
// their doc comments say. As the contract allows, nothing here checks its
// input again: the lock.Client did (driver.Validate). Any valid name and
// owner is safe in a key (encodeName), and every TTL is rounded up to the
// server's whole seconds (keyTTL, Granularity).

// Acquire admits req.Owner as req asks: a lock, with or without a place in
// line, a resumed lease, or a permit. NATS KV has no transaction over
// several keys, so a set of names (req.Names) is never one step here: it
// answers driver.ErrNotAtomic and changes nothing, and the Client takes the
// names one by one.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	var (
		tok fence.Token
		err error
	)
	switch {
	case req.Kind.Permit():
		return b.acquirePermit(ctx, req)
	case req.Names != nil:
		return driver.Grant{}, driver.ErrNotAtomic
	case req.Resume:
		tok, err = b.resume(ctx, req.Name, req.Owner, req.TTL)
	case req.Place > 0:
		tok, err = b.acquireInLine(ctx, req.Name, req.Owner, req.Metadata, req.TTL, req.Place)
	default:
		tok, err = b.acquireLock(ctx, req.Name, req.Owner, req.Metadata, req.TTL)
	}
	return driver.Grant{Token: tok}, err
}

// Extend renews the claimed lease to ttl (rounded up to whole seconds) from
// now.
func (b *Backend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.extendPermit(ctx, c.Name, c.Owner, ttl)
	}
	return b.extendLock(ctx, c.Name, c.Owner, ttl)
}

// Release frees the claimed lease. The message it publishes (a lock key's
// delete marker, a permit name's new state) is what wakes the waiters.
func (b *Backend) Release(ctx context.Context, c driver.Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.releasePermit(ctx, c.Name, c.Owner)
	}
	return b.releaseLock(ctx, c.Name, c.Owner)
}

// Await blocks, on core NATS subscriptions, until a change that may be the
// claim's owner's turn in line, max has passed, or ctx ends (see awaitTurn
// and awaitPermit). An owner this Backend keeps no place for waits max.
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.Kind.Permit() {
		return b.awaitPermit(ctx, c.Name, c.Owner, max)
	}
	return b.awaitTurn(ctx, c.Name, c.Owner, max)
}

// Leave removes the claim's owner's place in line, which wakes the waiters
// behind it; nil when it has none.
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
// with the live places in its line.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	if kind.Permit() {
		return b.inspectPermits(ctx, name)
	}
	return b.inspectLock(ctx, name)
}
