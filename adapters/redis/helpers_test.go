package redis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
)

func testCtx(t *testing.T) context.Context { return testkit.Context(t) }

func newOwner(t *testing.T) string { return testkit.Owner(t) }

// roundTrips counts the network round trips a go-redis client makes: one per
// command, one per pipeline. It also records what was sent.
type roundTrips struct {
	mu   sync.Mutex
	n    int
	sent []string
}

var _ goredis.Hook = (*roundTrips)(nil)

func (r *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		r.add("pipeline[" + strings.Join(names, " ") + "]")
		return next(ctx, cmds)
	}
}

func (r *roundTrips) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.sent = append(r.sent, what)
}

// take returns the count and what was sent since the last take, and resets
// both.
func (r *roundTrips) take() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, sent := r.n, r.sent
	r.n, r.sent = 0, nil
	return n, sent
}

// counted returns a client for addr whose round trips are counted.
func counted(t *testing.T, addr string) (*goredis.Client, *roundTrips) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	rt := &roundTrips{}
	c.AddHook(rt)
	return c, rt
}

// eventually polls cond every few milliseconds until it holds, failing t
// after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The driver calls the tests make, one helper per shape of call, so that a
// test reads as what it asks (a lock, a place in line, a set, a resume, a
// permit) rather than as a Request literal.

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

// acquireSet asks for every lock of names at once.
func acquireSet(ctx context.Context, b driver.Backend, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Names: names, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
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

func leave(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Leave(ctx, lockClaim(name, owner))
}

// lockInfo is what Inspect reports of a lock, its holder (if any) flattened.
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

// Permit requests the tests send (Name and Owner are acquirePermit's).

func semaphore(n int, ttl, place time.Duration) driver.Request {
	return driver.Request{Kind: driver.Semaphore, Limit: n, TTL: ttl, Place: place}
}

func reader(ttl, place time.Duration) driver.Request {
	return driver.Request{Kind: driver.Read, TTL: ttl, Place: place}
}

func writer(ttl, place time.Duration) driver.Request {
	return driver.Request{Kind: driver.Write, TTL: ttl, Place: place}
}

// acquirePermit asks for req on the permit name for owner.
func acquirePermit(ctx context.Context, b driver.Backend, name, owner string, req driver.Request) (driver.Grant, error) {
	req.Name, req.Owner = name, owner
	return b.Acquire(ctx, req)
}

// permitClaim is owner's permit or place on the permit name. Claims and
// Inspect of permits do not depend on the kind: any permit kind will do.
func permitClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Write}
}

func extendPermit(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	return b.Extend(ctx, permitClaim(name, owner), ttl)
}

func releasePermit(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, permitClaim(name, owner))
}

func leavePermitLine(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Leave(ctx, permitClaim(name, owner))
}

func awaitPermit(ctx context.Context, b driver.Backend, name, owner string, max time.Duration) error {
	return b.Await(ctx, permitClaim(name, owner), max)
}

func inspectPermits(ctx context.Context, b driver.Backend, name string) (driver.Info, error) {
	return b.Inspect(ctx, name, driver.Write)
}
