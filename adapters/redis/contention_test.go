package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestContentionUnderFaults runs the contention run of every backend
// (chaos.RunContention) on Redis: 16 workers on one lock, a semaphore and a
// read-write lock at once, with pauses past the TTL, waits given up,
// waiters killed in line, network faults (delays, cuts, lost replies)
// through fault proxies, and the lock server lost with waiters in line:
//
//   - single: one throwaway redis-server without persistence, killed and
//     started again. It comes back empty: leases, places and token counters
//     are gone (ServerForgets). Tokens must still rise (the adapter's clock
//     floor), which the run's token and stale-write checks catch.
//   - failover: a primary and a replica; the primary is killed, the
//     replica promoted and the clients pointed at it, and the old primary
//     comes back as the new primary's replica. Replication is asynchronous,
//     so the promoted replica may lack the last leases and places
//     (ServerForgets).
//
// Both use go-redis with its default options, as users run it.
//
// The fenced Store is on a server of its own, behind its own proxy (so
// that it gets the network faults too), which never restarts or fails
// over: a Store on a server that loses its data loses its fences and
// values with it, and the run's lost-increment and stale-write checks
// would fire on the documented limit, not on a bug (docs/redis.md,
// "Restart without persistence" and "Failover": fencing cannot be stronger
// than the store's durability). The issue is the lock server going away
// with waiters queued.
func TestContentionUnderFaults(t *testing.T) {
	t.Run("single", func(t *testing.T) { chaos.RunContentionTest(t, contentionSingle) })
	t.Run("failover", func(t *testing.T) { chaos.RunContentionTest(t, contentionFailover) })
}

// TestSoak is the soak (bench/soak) of both setups: the contention run for
// as long as FENCEKIT_SOAK says, with nothing allowed to grow (keys on the
// lock and store servers, the clients' connections, goroutines, heap); it
// skips without it.
func TestSoak(t *testing.T) {
	t.Run("single", func(t *testing.T) { chaos.RunSoakTest(t, contentionSingle) })
	t.Run("failover", func(t *testing.T) { chaos.RunSoakTest(t, contentionFailover) })
}

// contentionSingle is one throwaway redis-server, killed and started again.
func contentionSingle(t *testing.T) chaos.ContentionConfig {
	srv := testkit.NewRedisServer(t)
	proxy := testkit.NewProxy(t, srv.Addr())
	store, storeSrv, storeProxy := contentionStore(t)
	client := defaultClient(t, proxy.Addr(), nil)
	return chaos.ContentionConfig{
		Backend: fenceredis.NewBackend(client, nil),
		Store:   store,
		Name:    "redis",
		Network: chaos.ProxyNetworks(proxy, storeProxy),
		// A crash: SIGKILL, then the server starts again, empty, and Start
		// returns once it answers PING. (Start fails the test itself if the
		// server cannot be started.)
		Restart: func(context.Context) error {
			srv.Kill()
			srv.Start()
			return nil
		},
		ServerForgets: true,
		Probe:         redisProbe(func() *testkit.RedisServer { return srv }, storeSrv, client),
	}
}

// contentionFailover is a primary and a replica, failed over by hand.
func contentionFailover(t *testing.T) chaos.ContentionConfig {
	f := newManualFailover(t)
	store, storeSrv, storeProxy := contentionStore(t)
	client := defaultClient(t, f.proxies[0].Addr(), f.dial)
	return chaos.ContentionConfig{
		Backend:       fenceredis.NewBackend(client, nil),
		Store:         store,
		Name:          "redis failover",
		Network:       chaos.ProxyNetworks(f.proxies[0], f.proxies[1], storeProxy),
		Restart:       f.failover,
		ServerForgets: true,
		Probe:         redisProbe(func() *testkit.RedisServer { return f.servers[f.primary.Load()] }, storeSrv, client),
	}
}

// redisProbe reports the keys on the lock server (the current primary)
// and on the store's server, and the connections the lock's client keeps
// open.
func redisProbe(lockSrv func() *testkit.RedisServer, storeSrv *testkit.RedisServer, client *goredis.Client) func(context.Context) (map[string]int64, error) {
	dbsize := func(s *testkit.RedisServer) (int64, error) {
		v, err := s.Do("DBSIZE")
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	}
	return func(context.Context) (map[string]int64, error) {
		lockKeys, err := dbsize(lockSrv())
		if err != nil {
			return nil, err
		}
		storeKeys, err := dbsize(storeSrv)
		if err != nil {
			return nil, err
		}
		return map[string]int64{
			"lock_server_keys":  lockKeys,
			"store_server_keys": storeKeys,
			"lock_client_conns": int64(client.PoolStats().TotalConns),
		}, nil
	}
}

// defaultClient is a go-redis client with the default options, for addr,
// dialling through dial when it is not nil; closed when t ends.
func defaultClient(t *testing.T, addr string, dial faultproxy.DialFunc) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Dialer: dial})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// contentionStore is a Store on a throwaway server of its own, which no
// restart or failover touches, reached through a proxy of its own.
func contentionStore(t *testing.T) (*fenceredis.Store, *testkit.RedisServer, *faultproxy.Proxy) {
	srv := testkit.NewRedisServer(t)
	proxy := testkit.NewProxy(t, srv.Addr())
	return fenceredis.NewStore(defaultClient(t, proxy.Addr(), nil), nil), srv, proxy
}

// manualFailover is a primary and a replica, each behind a proxy, and
// clients that dial the proxy of whichever is the primary. A failover
// kills the primary, promotes the replica, points the clients at it, and
// starts the old primary again as the new one's replica.
//
// It promotes by hand (REPLICAOF NO ONE), as an operator or a Sentinel
// would, rather than with testkit's Sentinel group: a Sentinel-backed
// client dials the addresses the Sentinels report, which would bypass the
// fault proxies, and a Sentinel does not fail the same primary over again
// within twice its failover timeout (10 s in testkit's group), while the
// run fails over every few seconds. The Sentinel's own part, clients and
// waiters following its promotion, is TestSentinelFailoverWithWaitersQueued
// in internal/failover.
type manualFailover struct {
	t       *testing.T
	servers [2]*testkit.RedisServer
	proxies [2]*faultproxy.Proxy
	primary atomic.Int32 // index of the primary in servers and proxies
}

func newManualFailover(t *testing.T) *manualFailover {
	f := &manualFailover{t: t}
	f.servers[0] = testkit.NewRedisServer(t)
	f.servers[1] = testkit.NewRedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(f.servers[0].Port()))
	f.servers[1].WaitReplicating()
	for i, s := range f.servers {
		f.proxies[i] = testkit.NewProxy(t, s.Addr())
	}
	return f
}

// dial is the clients' dial function: the current primary's proxy,
// whatever address the client was configured with.
func (f *manualFailover) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	p := f.proxies[f.primary.Load()]
	return p.Dial(ctx, network, p.Addr())
}

// failover loses the primary with waiters in line and returns once the
// promoted replica serves and the old primary replicates from it again,
// ready for the next failover.
func (f *manualFailover) failover(ctx context.Context) error {
	old := f.primary.Load()
	next := 1 - old
	oldSrv, nextSrv := f.servers[old], f.servers[next]
	killed := time.Now()
	oldSrv.Kill()
	if _, err := nextSrv.Do("REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("promote %s: %w", nextSrv.Addr(), err)
	}
	if err := pollInfo(ctx, nextSrv, "role", "master"); err != nil {
		return err
	}
	f.primary.Store(next)
	promoted := time.Since(killed)
	// Kill and Start are safe here (Start fails the test itself only if the
	// server cannot be started at all); the old primary comes back empty,
	// as a primary (servers[0]) or as a replica of the wrong node's port
	// (servers[1], whose arguments name servers[0]): either way it is told
	// whose replica it is. No client dials it meanwhile.
	oldSrv.Start()
	if _, err := oldSrv.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(nextSrv.Port())); err != nil {
		return fmt.Errorf("make %s a replica: %w", oldSrv.Addr(), err)
	}
	if err := pollInfo(ctx, oldSrv, "master_link_status", "up"); err != nil {
		return err
	}
	f.t.Logf("failover: %s killed, %s promoted and dialled after %v, %s its replica after %v",
		oldSrv.Addr(), nextSrv.Addr(), promoted.Round(time.Millisecond), oldSrv.Addr(), time.Since(killed).Round(time.Millisecond))
	return nil
}

// pollInfo waits until s's INFO replication says field:want, at most 30 s.
func pollInfo(ctx context.Context, s *testkit.RedisServer, field, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		info, err := s.Do("INFO", "replication")
		if err == nil && infoField(info, field) == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("%s: no %s:%s", s.Addr(), field, want), err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}
