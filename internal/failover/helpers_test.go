package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// retry calls f until it returns nil or a non-retryable error (as decided
// by retryable), or until d has passed, and returns the last error and the
// errors seen on the way.
func retry(ctx context.Context, d time.Duration, f func(context.Context) error) (error, []error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var seen []error
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		acancel()
		if err == nil {
			return nil, seen
		}
		seen = append(seen, err)
		if errors.Is(err, fence.ErrStale) || errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrNotHeld) {
			return err, seen
		}
		select {
		case <-ctx.Done():
			return err, seen
		case <-time.After(50 * time.Millisecond): // poll interval while the servers recover
		}
	}
}

// mustAcquire acquires name for owner, retrying transient failures for up
// to 20 s (a failover in progress).
func mustAcquire(t *testing.T, ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) fence.Token {
	t.Helper()
	var tok fence.Token
	err, seen := retry(ctx, 20*time.Second, func(c context.Context) error {
		var err error
		tok, err = acquire(c, b, name, owner, ttl)
		return err
	})
	if err != nil {
		t.Fatalf("acquire %s: %v (after %d failed attempts)", name, err, len(seen))
	}
	return tok
}

// errNotYet is a condition not met yet, for retry.
var errNotYet = errors.New("not yet")

func errorsIsNotFound(err error) bool { return errors.Is(err, fence.ErrNotFound) }

// The driver calls the tests make on the lock called name, one call each.

// acquire takes the lock for owner for ttl, without a place in line.
func acquire(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
	return g.Token, err
}

// release gives up owner's lease.
func release(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive})
}

// extend renews owner's lease for ttl.
func extend(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	return b.Extend(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}, ttl)
}

// lockInfo is what Inspect reports of a lock: whether it is held and, when
// it is, its holder.
type lockInfo struct {
	Held bool
	driver.Holder
}

// inspect reports who holds the lock.
func inspect(ctx context.Context, b driver.Backend, name string) (lockInfo, error) {
	info, err := b.Inspect(ctx, name, driver.Exclusive)
	if err != nil || len(info.Holders) == 0 {
		return lockInfo{}, err
	}
	return lockInfo{Held: true, Holder: info.Holders[0]}, nil
}
