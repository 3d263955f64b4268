// Package faulttest holds the fault-injection scenarios: each test puts a
// fault (a paused holder, a delayed or lost packet, a restarted or promoted
// server, a flushed script cache, a cut connection) between a holder and a
// backend and checks the outcome fencekit promises. docs/reliability.md
// lists them, backend by backend.
//
// Network faults come from testkit's proxy in front of Redis and PostgreSQL,
// and from simNet, an in-process equivalent, for the memory backend.
// Tests that restart, pause or promote a server use throwaway instances.
package faulttest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/adapters/postgres"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// faults is the network between a holder and its backend: the proxy's
// controls for Redis and PostgreSQL, simNet's for memory.
type faults interface {
	// dropNextReply loses the reply to the next request the server
	// executes, and cuts that connection; the channel closes when it has.
	dropNextReply() <-chan struct{}
	// delay sets the latency of requests (up) and replies (down). A
	// latency lowered later releases what waits.
	delay(up, down time.Duration)
	// cut breaks every connection and refuses new ones until heal.
	cut()
	heal()
}

// rig is one backend set up for a scenario: the faulty path a holder under
// test goes through, and a direct path for other holders and for looking
// at the server's state.
type rig struct {
	name string
	ttl  time.Duration // a short lease, with margin for -race on 2 cores

	backend driver.Backend // through the faults
	store   fence.Store
	net     faults
	chaos   chaos.Network // the same faults for the chaos runner

	direct      driver.Backend // never faulty
	directStore fence.Store

	// warm makes sure the faulty path has an idle connection on which the
	// statements of a lock acquisition and a store write are ready, so that
	// a dropped reply hits the request itself and not a handshake.
	warm func(t *testing.T)
	// resends is set when the faulty path's client sends a request again
	// after a lost reply on its own (go-redis's defaults do for the calls
	// the adapter lets it resend).
	resends bool
	// child describes how a worker process reaches the same backend;
	// nil when it cannot (memory lives in this process).
	child map[string]string
}

// backends builds every rig; each scenario runs on those it applies to.
var backends = []struct {
	name string
	make func(t *testing.T) *rig
}{
	{"memory", memoryRig},
	{"redis", func(t *testing.T) *rig { return redisRig(t, "redis", hardenedRedis, false) }},
	{"postgres", postgresRig},
	// go-redis as applications make it: resends after a broken connection
	// (MaxRetries 3) and no context deadlines on the socket. The hardened
	// client alone hid a resent Release and calls that outlived their
	// context.
	{"redis-defaults", func(t *testing.T) *rig { return redisRig(t, "redis-defaults", defaultRedis, true) }},
}

// eachBackend runs f as a subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.make(t)) })
	}
}

// eachServerBackend is eachBackend without the in-process one: for faults
// that need the backend to live outside the test process.
func eachServerBackend(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, b := range backends {
		if b.name == "memory" {
			continue
		}
		t.Run(b.name, func(t *testing.T) { f(t, b.make(t)) })
	}
}

func memoryRig(t *testing.T) *rig {
	b, s := memory.NewBackend(), memory.NewStore()
	n := newSimNet()
	t.Cleanup(n.heal)
	return &rig{
		name: "memory", ttl: 150 * time.Millisecond,
		backend: simBackend{n, b}, store: simStore{n, s}, net: n, chaos: chaosNet{n},
		direct: b, directStore: s,
		warm: func(*testing.T) {},
	}
}

// hardenedRedis returns a client for addr that surfaces faults as they are:
// no retries of its own, and contexts bound every socket read.
func hardenedRedis(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{
		Addr:                  addr,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		DialTimeout:           5 * time.Second,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		PoolSize:              4,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// defaultRedis returns a client for addr with go-redis's default options.
func defaultRedis(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisRig builds a Redis rig whose clients come from newClient.
func redisRig(t *testing.T, name string, newClient func(t *testing.T, addr string) *goredis.Client, resends bool) *rig {
	url := testkit.RedisURL(t)
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	p := testkit.NewProxy(t, opts.Addr)
	prefix := testkit.Namespace(t)
	direct := hardenedRedis(t, opts.Addr)
	faulty := newClient(t, p.Addr())
	t.Cleanup(func() { deleteRedisPrefix(t, direct, prefix) })
	r := &rig{
		name: name, ttl: 150 * time.Millisecond, resends: resends,
		backend:     fenceredis.NewBackend(faulty, &fenceredis.BackendOptions{Prefix: prefix}),
		store:       fenceredis.NewStore(faulty, &fenceredis.StoreOptions{Prefix: prefix}),
		net:         proxyFaults{p},
		chaos:       chaos.ProxyNetwork(p),
		direct:      fenceredis.NewBackend(direct, &fenceredis.BackendOptions{Prefix: prefix}),
		directStore: fenceredis.NewStore(direct, &fenceredis.StoreOptions{Prefix: prefix}),
		child:       map[string]string{"backend": "redis", "url": url, "prefix": prefix},
	}
	r.warm = func(t *testing.T) { warmUp(t, r) }
	return r
}

// deleteRedisPrefix removes a test's keys from the shared server.
func deleteRedisPrefix(t *testing.T, c *goredis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		_ = c.Unlink(ctx, iter.Val()).Err()
	}
	if err := iter.Err(); err != nil {
		t.Logf("delete keys under %s: %v", prefix, err)
	}
}

func postgresRig(t *testing.T) *rig {
	direct := testkit.Postgres(t)
	ctx := testCtx(t)
	if err := postgres.Migrate(ctx, direct, nil); err != nil {
		t.Fatal(err)
	}
	cfg := direct.Config()
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p := testkit.NewProxy(t, target)
	host, port, _ := net.SplitHostPort(p.Addr())
	pn, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = 4
	// No ping before handing out a connection: the ping would be the
	// request whose reply a test drops.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	faulty, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(faulty.Close)
	r := &rig{
		name: "postgres", ttl: 300 * time.Millisecond,
		backend: postgres.NewBackend(faulty, nil), store: postgres.NewStore(faulty, nil),
		net:    proxyFaults{p},
		chaos:  chaos.ProxyNetwork(p),
		direct: postgres.NewBackend(direct, nil), directStore: postgres.NewStore(direct, nil),
		child: map[string]string{
			"backend": "postgres",
			"url":     direct.Config().ConnString(),
			"schema":  cfg.ConnConfig.RuntimeParams["search_path"],
		},
	}
	r.warm = func(t *testing.T) { warmUp(t, r) }
	return r
}

// warmUp runs an acquisition, a release and a store write on the faulty
// path, so that its pooled connection exists and (for pgx) has the
// statements prepared: the next request then goes out in one round trip.
func warmUp(t *testing.T, r *rig) {
	t.Helper()
	ctx := testCtx(t)
	owner := newOwner(t)
	name, key := "warm-"+owner[:8], "warm-"+owner[:8]
	if _, err := acquireLock(ctx, r.backend, name, owner, time.Second); err != nil {
		t.Fatalf("warm-up acquire: %v", err)
	}
	if err := extendLock(ctx, r.backend, name, owner, time.Second); err != nil {
		t.Fatalf("warm-up extend: %v", err)
	}
	if _, err := inspectLock(ctx, r.backend, name); err != nil {
		t.Fatalf("warm-up inspect: %v", err)
	}
	if err := releaseLock(ctx, r.backend, name, owner); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
	if err := r.store.Advance(ctx, key, 1); err != nil {
		t.Fatalf("warm-up advance: %v", err)
	}
	if err := r.store.Put(ctx, key, 1, []byte("warm")); err != nil {
		t.Fatalf("warm-up put: %v", err)
	}
	if _, err := r.store.Get(ctx, key); err != nil {
		t.Fatalf("warm-up get: %v", err)
	}
}

// proxyFaults drives testkit's proxy.
type proxyFaults struct{ p *faultproxy.Proxy }

func (f proxyFaults) dropNextReply() <-chan struct{} { return f.p.DropNextReply() }
func (f proxyFaults) delay(up, down time.Duration) {
	f.p.SetLatency(faultproxy.Upstream, up)
	f.p.SetLatency(faultproxy.Downstream, down)
}
func (f proxyFaults) cut() { f.p.RefuseNew(true); f.p.CutAll() }
func (f proxyFaults) heal() {
	f.p.Heal()
}

func testCtx(t *testing.T) context.Context { return testkit.Context(t) }

func newOwner(t *testing.T) string { return testkit.Owner(t) }

// unique returns a lock name or key of this test's own.
func unique(t *testing.T, what string) string { return what + "-" + newOwner(t)[:10] }

// waitFree polls the direct path until name's lease is gone (expired or
// released), failing after 10 s.
func waitFree(t *testing.T, r *rig, name string) {
	t.Helper()
	waitFreeOn(t, r.direct, name)
}

// waitFreeOn polls b until name's lease is gone, failing after 10 s.
func waitFreeOn(t *testing.T, b driver.Backend, name string) {
	t.Helper()
	ctx := testCtx(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := inspectLock(ctx, b, name)
		if err != nil {
			t.Fatalf("inspect %s: %v", name, err)
		}
		if !info.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease on %s still held after 10s: %+v", name, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustPut writes through w and fails t on error.
func mustPut(t *testing.T, w *lock.Writer, key, value string) {
	t.Helper()
	if err := w.Put(testCtx(t), key, []byte(value)); err != nil {
		t.Fatalf("put %s=%s: %v", key, value, err)
	}
}

// expectValue checks key's value and fence on the direct path.
func expectValue(t *testing.T, r *rig, key, value string, fenceTok fence.Token) {
	t.Helper()
	rec, err := r.directStore.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if string(rec.Value) != value || rec.Fence != fenceTok {
		t.Fatalf("%s = %q (fence %d), want %q (fence %d)", key, rec.Value, rec.Fence, value, fenceTok)
	}
}

// expectStale checks that err is a refusal for a stale token.
func expectStale(t *testing.T, what string, err error) {
	t.Helper()
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("%s: got %v, want fence.ErrStale", what, err)
	}
}
