package faulttest

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// The driver's calls on an exclusive lock, as the scenarios make them
// directly (a second process with a holder's owner, an observer of the
// server's state).

func lockClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
}

// acquireLock asks b for the lock name for owner, without a place in line.
func acquireLock(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
	return g.Token, err
}

// enqueue asks b for the lock name for owner, keeping its place in line
// for place when it is not admitted.
func enqueue(ctx context.Context, b driver.Backend, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: place})
	return g.Token, err
}

func extendLock(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	return b.Extend(ctx, lockClaim(name, owner), ttl)
}

func releaseLock(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, lockClaim(name, owner))
}

// lockInfo is what Inspect reports of a lock, which has at most one
// holder.
type lockInfo struct {
	Held     bool
	Owner    string
	Token    fence.Token
	TTL      time.Duration
	Metadata string
	Waiting  int
}

// inspectLock asks b about the lock called name.
func inspectLock(ctx context.Context, b driver.Backend, name string) (lockInfo, error) {
	info, err := b.Inspect(ctx, name, driver.Exclusive)
	if err != nil {
		return lockInfo{}, err
	}
	v := lockInfo{Waiting: info.Waiting}
	if len(info.Holders) > 0 {
		h := info.Holders[0]
		v.Held, v.Owner, v.Token, v.TTL, v.Metadata = true, h.Owner, h.Token, h.TTL, h.Metadata
	}
	return v, nil
}

func describe(info lockInfo) string {
	return fmt.Sprintf("held=%v owner=%.8s token=%d ttl=%v", info.Held, info.Owner, info.Token, info.TTL)
}
