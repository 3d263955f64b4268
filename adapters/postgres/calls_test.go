package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// calls is a Backend as these tests call it directly, past a lock.Client:
// one method per shape, each building its driver.Request or driver.Claim
// (as a Client would, valid input only: bad input goes through a Client).
// It is a driver.Backend itself, for lock.New.
type calls struct{ *postgres.Backend }

// newCalls returns a Backend on pool, as NewBackend does.
func newCalls(pool postgres.Pool, opts *postgres.Options) calls {
	return calls{postgres.NewBackend(pool, opts)}
}

// anyPermit is the Kind of the claims on permit names: any permit kind
// names them.
const anyPermit = driver.Semaphore

func lockClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
}

func permitClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: anyPermit}
}

// acquire takes the lock name for owner.
func (c calls) acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	return c.acquireMD(ctx, name, owner, ttl, "")
}

// acquireMD takes the lock name for owner with holder metadata md.
func (c calls) acquireMD(ctx context.Context, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	g, err := c.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Metadata: md})
	return g.Token, err
}

// enqueue takes the lock name for owner, or keeps its place in line for
// place.
func (c calls) enqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	g, err := c.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: place})
	return g.Token, err
}

// acquireSet takes the locks names for owner, all or none.
func (c calls) acquireSet(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	g, err := c.Acquire(ctx, driver.Request{Names: names, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
	return g.Tokens, err
}

// resume adopts owner's live lease on name.
func (c calls) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := c.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Resume: true})
	return g.Token, err
}

func (c calls) extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	return c.Extend(ctx, lockClaim(name, owner), ttl)
}

func (c calls) release(ctx context.Context, name, owner string) error {
	return c.Release(ctx, lockClaim(name, owner))
}

func (c calls) leave(ctx context.Context, name, owner string) error {
	return c.Leave(ctx, lockClaim(name, owner))
}

// inspect reports the lock name.
func (c calls) inspect(ctx context.Context, name string) (driver.Info, error) {
	return c.Inspect(ctx, name, driver.Exclusive)
}

// permit takes a permit on name for owner as req says (its Kind, Limit,
// TTL and Place; its Name and Owner are set here).
func (c calls) permit(ctx context.Context, name, owner string, req driver.Request) (driver.Grant, error) {
	req.Name, req.Owner = name, owner
	return c.Acquire(ctx, req)
}

func (c calls) extendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	return c.Extend(ctx, permitClaim(name, owner), ttl)
}

func (c calls) releasePermit(ctx context.Context, name, owner string) error {
	return c.Release(ctx, permitClaim(name, owner))
}

func (c calls) awaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	return c.Await(ctx, permitClaim(name, owner), max)
}

func (c calls) leavePermitLine(ctx context.Context, name, owner string) error {
	return c.Leave(ctx, permitClaim(name, owner))
}

// inspectPermits reports the permit name name.
func (c calls) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	return c.Inspect(ctx, name, anyPermit)
}

// holderOf returns a lock's holder as Inspect reports it, and whether it
// is held.
func holderOf(info driver.Info) (driver.Holder, bool) {
	if len(info.Holders) == 0 {
		return driver.Holder{}, false
	}
	return info.Holders[0], true
}

// migrated returns pool after creating the default tables in its schema.
func migrated(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}
