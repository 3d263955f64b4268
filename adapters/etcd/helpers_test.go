package etcd_test

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// The driver calls the tests make, one helper per shape of call, so that a
// test reads as what it asks (a lock, a place in line, a set, a resume, a
// permit) rather than as a Request literal. They call the Backend
// directly, as the lock.Client would after checking the input: bad input
// goes through a lock.Client instead.

// acquire asks for the lock name for owner for ttl, without a place in
// line, and returns its token.
func acquire(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	return acquireMD(ctx, b, name, owner, ttl, "")
}

// acquireMD is acquire with holder metadata md.
func acquireMD(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Metadata: md})
	return g.Token, err
}

// enqueue asks for the lock name keeping owner's place in line for place.
func enqueue(ctx context.Context, b driver.Backend, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: place})
	return g.Token, err
}

// acquireSet asks for every lock of names at once, with holder metadata md.
func acquireSet(ctx context.Context, b driver.Backend, names []string, owner string, ttl time.Duration, md string) ([]fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Names: names, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Metadata: md})
	return g.Tokens, err
}

// resume asks to adopt owner's live lease on name.
func resume(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Resume: true})
	return g.Token, err
}

// lockClaim is owner's lease or place on the lock name.
func lockClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
}

func extend(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	return b.Extend(ctx, lockClaim(name, owner), ttl)
}

func release(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, lockClaim(name, owner))
}

// awaitTurn waits for owner's turn in the line of the lock name, at most max.
func awaitTurn(ctx context.Context, b driver.Backend, name, owner string, max time.Duration) error {
	return b.Await(ctx, lockClaim(name, owner), max)
}

func leave(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Leave(ctx, lockClaim(name, owner))
}

// lockInfo is what Inspect reports of a lock, its holder (if any)
// flattened.
type lockInfo struct {
	Held bool
	driver.Holder
	Waiting int
}

// inspect reports the lock name.
func inspect(ctx context.Context, b driver.Backend, name string) (lockInfo, error) {
	info, err := b.Inspect(ctx, name, driver.Exclusive)
	li := lockInfo{Held: len(info.Holders) > 0, Waiting: info.Waiting}
	if li.Held {
		li.Holder = info.Holders[0]
	}
	return li, err
}

// acquirePermit asks for req (see sem and rw) on the permit name for owner.
func acquirePermit(ctx context.Context, b driver.Backend, name, owner string, req driver.Request) (driver.Grant, error) {
	req.Name, req.Owner = name, owner
	return b.Acquire(ctx, req)
}

// permitClaim is owner's permit or place on the permit name. Claims and
// Inspect of permits do not depend on the permit kind: any will do.
func permitClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Write}
}

func extendPermit(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	return b.Extend(ctx, permitClaim(name, owner), ttl)
}

func releasePermit(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, permitClaim(name, owner))
}

func awaitPermit(ctx context.Context, b driver.Backend, name, owner string, max time.Duration) error {
	return b.Await(ctx, permitClaim(name, owner), max)
}

func leavePermitLine(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Leave(ctx, permitClaim(name, owner))
}

func inspectPermits(ctx context.Context, b driver.Backend, name string) (driver.Info, error) {
	return b.Inspect(ctx, name, driver.Write)
}
