package nats_test

import (
	"context"
	"time"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// direct calls a Backend's driver methods with the arguments of the
// per-shape methods it had before the driver contract, for the tests that
// talk to a Backend without a lock.Client (round trips, what the bucket
// holds, faults): each method is one driver call. Its methods shadow the
// Backend's own of the same name, so a direct is no driver.Backend: give
// lock.New its Backend. Nothing here checks input, as the Backend does not:
// bad-input tests go through a lock.Client.
type direct struct{ *fencenats.Backend }

// lockInfo is what Inspect reports of a lock, flattened: its one holder (if
// Held) and the live places in its line.
type lockInfo struct {
	Name     string
	Held     bool
	Owner    string
	Token    fence.Token
	TTL      time.Duration
	Metadata string
	Waiting  int
}

// permitReq is what a permit acquire asks for: its kind, a semaphore's
// limit, the TTL, and the place in line (0: none).
type permitReq struct {
	Kind  driver.Kind
	Limit int
	TTL   time.Duration
	Place time.Duration
}

// semaphore asks for one of n permits.
func semaphore(n int, ttl, place time.Duration) permitReq {
	return permitReq{Kind: driver.Semaphore, Limit: n, TTL: ttl, Place: place}
}

// anyPermit is the kind a permit claim names: Extend, Release, Await and
// Leave find an owner's permit or place whatever its kind.
const anyPermit = driver.Write

func lockClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
}

func permitClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: anyPermit}
}

func (b direct) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
	return g.Token, err
}

// AcquireOrEnqueue is Acquire with a place in line.
func (b direct) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: place})
	return g.Token, err
}

// Resume is Acquire with Resume.
func (b direct) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Resume: true})
	return g.Token, err
}

func (b direct) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.Backend.Extend(ctx, lockClaim(name, owner), ttl)
}

func (b direct) Release(ctx context.Context, name, owner string) error {
	return b.Backend.Release(ctx, lockClaim(name, owner))
}

// AwaitTurn is Await in a lock's line.
func (b direct) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	return b.Backend.Await(ctx, lockClaim(name, owner), max)
}

// LeaveQueue is Leave of a lock's line.
func (b direct) LeaveQueue(ctx context.Context, name, owner string) error {
	return b.Backend.Leave(ctx, lockClaim(name, owner))
}

func (b direct) Inspect(ctx context.Context, name string) (lockInfo, error) {
	di, err := b.Backend.Inspect(ctx, name, driver.Exclusive)
	if err != nil {
		return lockInfo{}, err
	}
	info := lockInfo{Name: di.Name, Waiting: di.Waiting}
	if len(di.Holders) > 0 {
		h := di.Holders[0]
		info.Held, info.Owner, info.Token, info.TTL, info.Metadata = true, h.Owner, h.Token, h.TTL, h.Metadata
	}
	return info, nil
}

// AcquirePermit is Acquire of a permit kind.
func (b direct) AcquirePermit(ctx context.Context, name, owner string, req permitReq) (driver.Grant, error) {
	return b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: req.TTL, Kind: req.Kind, Limit: req.Limit, Place: req.Place})
}

// ExtendPermit is Extend of a permit.
func (b direct) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.Backend.Extend(ctx, permitClaim(name, owner), ttl)
}

// ReleasePermit is Release of a permit.
func (b direct) ReleasePermit(ctx context.Context, name, owner string) error {
	return b.Backend.Release(ctx, permitClaim(name, owner))
}

// AwaitPermit is Await in a permit name's line.
func (b direct) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	return b.Backend.Await(ctx, permitClaim(name, owner), max)
}

// LeavePermitLine is Leave of a permit name's line.
func (b direct) LeavePermitLine(ctx context.Context, name, owner string) error {
	return b.Backend.Leave(ctx, permitClaim(name, owner))
}

// InspectPermits is Inspect of a permit name.
func (b direct) InspectPermits(ctx context.Context, name string) (driver.Info, error) {
	return b.Backend.Inspect(ctx, name, anyPermit)
}
