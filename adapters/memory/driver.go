package memory

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// This file is the driver contract (lock/driver) over the backend's state:
// each method checks its context, takes the mutex, and sends the request to
// the code of its shape (backend.go and queue.go for locks, multi.go for
// sets, resume.go, permits.go for semaphores and read-write locks). Every
// call is one critical section, so each check and its write are atomic. As
// the contract allows, nothing here checks its input again: the lock.Client
// did (driver.Validate).

// Acquire admits req.Owner as req asks: a lock, with or without a place in
// line, a set of locks, a resumed lease, or a permit.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	switch {
	case req.Kind.Permit():
		return b.acquirePermit(req, now)
	case req.Names != nil:
		tokens, err := b.acquireSet(req.Names, req.Owner, req.TTL, req.Metadata, now)
		return driver.Grant{Tokens: tokens}, err
	case req.Resume:
		token, err := b.resume(req.Name, req.Owner, req.TTL, now)
		return driver.Grant{Token: token}, err
	case req.Place > 0:
		token, err := b.acquireInLine(req.Name, req.Owner, req.TTL, req.Place, req.Metadata, now)
		return driver.Grant{Token: token}, err
	default:
		token, err := b.acquireLock(req.Name, req.Owner, req.TTL, req.Metadata, now)
		return driver.Grant{Token: token}, err
	}
}

// Extend renews the claimed lease for ttl from now.
func (b *Backend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.Kind.Permit() {
		return b.extendPermit(c.Name, c.Owner, ttl, b.now())
	}
	return b.extendLock(c.Name, c.Owner, ttl, b.now())
}

// Release frees the claimed lease and wakes the waiters it lets in.
func (b *Backend) Release(ctx context.Context, c driver.Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.Kind.Permit() {
		return b.releasePermit(c.Name, c.Owner, b.now())
	}
	return b.releaseLock(c.Name, c.Owner, b.now())
}

// Await blocks until the claim's owner is woken in line (a release, or the
// owner became first in line while the lock is free), max has passed or ctx
// ends. It returns at once when the owner has no place in line. A wake-up
// sent before it is called is kept in the place's buffered box.
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	b.mu.Lock()
	var box chan struct{}
	if c.Kind.Permit() {
		box = b.permitWakeBox(c.Name, c.Owner)
	} else {
		box = b.lockWakeBox(c.Name, c.Owner)
	}
	b.mu.Unlock()
	if box == nil {
		return ctx.Err()
	}
	return wake.Wait(ctx, box, max)
}

// Leave removes the claim's owner's place in line, waking those it lets in.
func (b *Backend) Leave(ctx context.Context, c driver.Claim) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.Kind.Permit() {
		b.leavePermitLine(c.Name, c.Owner, b.now())
	} else {
		b.leaveLockLine(c.Name, c.Owner, b.now())
	}
	return nil
}

// Inspect reports the lock (kind Exclusive) or the permit name called name.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if kind.Permit() {
		return b.inspectPermits(name, b.now()), nil
	}
	return b.inspectLock(name, b.now()), nil
}
