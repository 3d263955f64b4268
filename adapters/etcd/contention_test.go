package etcd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestContentionUnderFaults runs the contention run of every backend
// (chaos.RunContention) on a three-member cluster of its own: 16 workers
// on one lock, a semaphore and a read-write lock at once, with pauses past
// the TTL, waits given up, waiters killed in line, network faults (the
// client reaches every member through a fault proxy of its own, and each
// fault hits all three) and restarts of a member, the leader when there is
// one. Data is in the Raft log, replicated, so a restart loses no lease
// or place: ServerForgets is false.
//
// TTL and PlaceTTL are 2 s, not the defaults 500 ms and 1 s: every lease
// and every place is an etcd lease, which the server rounds up to whole
// seconds and raises to its minimum, 2 s with the test cluster's timing
// (etcdtest), plus up to half a second for the expiry sweep. Shorter
// values would be longer on the server than the bound counts them.
func TestContentionUnderFaults(t *testing.T) {
	chaos.RunContentionTest(t, contentionSetup)
}

// TestSoak is the soak (bench/soak): the contention run for as long as
// FENCEKIT_SOAK says, with nothing allowed to grow (keys under the run's
// prefix, goroutines, heap); it skips without it.
func TestSoak(t *testing.T) {
	chaos.RunSoakTest(t, contentionSetup)
}

func contentionSetup(t *testing.T) chaos.ContentionConfig {
	c := etcdtest.New(t)
	var proxies []*faultproxy.Proxy
	var eps []string
	for _, m := range c.Members {
		p := testkit.NewProxy(t, strings.TrimPrefix(m.ClientURL, "http://"))
		proxies = append(proxies, p)
		eps = append(eps, "http://"+p.Addr())
	}
	cl := client(t, eps)
	direct := client(t, []string{c.Members[0].ClientURL, c.Members[1].ClientURL, c.Members[2].ClientURL})
	ns := prefix(t)
	return chaos.ContentionConfig{
		Name:     "etcd",
		Backend:  fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns}),
		Store:    fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns}),
		TTL:      2 * time.Second,
		PlaceTTL: 2 * time.Second,
		Network:  chaos.ProxyNetworks(proxies...),
		Restart:  func(ctx context.Context) error { return restartMember(ctx, c) },
		// Keys under the run's prefix, read from a member directly (not
		// through the proxies, which the run faults).
		Probe: func(ctx context.Context) (map[string]int64, error) {
			resp, err := direct.Get(ctx, ns, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return nil, err
			}
			return map[string]int64{"server_keys": resp.Count}, nil
		},
	}
}

// restartMember kills the leader (any member when the running ones agree
// on none yet) and starts it again from its data directory, and returns
// once every member is running and all agree on a leader: the cluster
// serves again, with all three members.
func restartMember(ctx context.Context, c *etcdtest.Cluster) error {
	m := c.Members[0]
	if l, err := c.Leader(ctx, 5*time.Second); err == nil {
		m = l
	}
	m.Stop()
	if err := c.Restart(m); err != nil {
		return err
	}
	_, err := c.Leader(ctx, etcdtest.StartTimeout)
	return err
}
