package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestContentionUnderFaults runs the contention run of every backend
// (chaos.RunContention) on a three-node JetStream cluster of its own with
// an R3 bucket: 16 workers on one lock, a semaphore and a read-write lock
// at once, with pauses past the TTL, waits given up, waiters killed in
// line, network faults (the client reaches every node through a fault
// proxy of its own, and each fault hits all three) and restarts (kill -9)
// of a node, the stream's leader when there is one. Every acknowledged
// write is on a quorum of the stream's replicas, and one node's crash
// loses nothing acknowledged (docs/nats.md), so ServerForgets is false.
//
// TTL is 1 s, not the default 500 ms: the Backend's TTLs are whole seconds
// on the server (fencenats.Granularity), so a 500 ms lease would live 1 s
// there, longer than the bound counts it.
//
// PauseChance is 0.3, not 0.1: under faults a NATS cycle is slow (a few
// round trips to an R3 stream, elections after a restart), so few cycles
// start in the 5 s of faults, and at 10% some seeds pause no worker at all
// (seed 4159093327807539 did not).
// CancelChance and KillChance are 0.2, not 0.08 and 0.1, for the same
// reason: a run must give up a wait and kill a waiter at least once, and at
// the defaults some seeds did neither (etcd seed 7553547600205866 gave up
// no wait).
//
// Quiet is the default (the bound plus 3 s) plus restartTime: a restart
// that begins late in the faults is not cut short, and the faults clear
// only when it has returned, which (the node's start, then its catching up
// on the stream) takes up to a few seconds; without the margin the time
// left to check the bound in could be shorter than the bound.
func TestContentionUnderFaults(t *testing.T) {
	chaos.RunContentionTest(t, func(t *testing.T) chaos.ContentionConfig {
		c := natstest.New(t, natstest.Config{Nodes: 3, Monitor: true})
		var proxies multiProxy
		var urls []string
		for _, n := range c.Nodes {
			p := testkit.NewProxy(t, n.Addr())
			proxies = append(proxies, p)
			urls = append(urls, "nats://"+p.Addr())
		}
		// The client keeps to the proxies, ignoring the nodes' own
		// addresses the cluster tells it about, so that every fault
		// reaches it.
		_, js := natstest.Connect(t, urls, natsgo.IgnoreDiscoveredServers())
		bucket := natstest.Bucket(t, js, 3)
		cfg := chaos.ContentionConfig{
			Name:    "nats",
			Backend: newBackend(t, js, bucket),
			Store:   newStore(t, js, bucket),
			TTL:     time.Second,
			Network: proxies,
			// Set for cfg.Bound below (it reads them before the
			// harness fills in its defaults); the harness's defaults.
			Workers:      16,
			PlaceTTL:     time.Second,
			CycleCost:    100 * time.Millisecond,
			PauseChance:  0.3,
			CancelChance: 0.2,
			KillChance:   0.2,
			Restart:      func(ctx context.Context) error { return restartStreamLeader(ctx, c, "KV_"+bucket) },
		}
		cfg.Quiet = cfg.Bound() + 3*time.Second + restartTime
		return cfg
	})
}

// restartTime is how long a restart may go on after the faults' end.
const restartTime = 5 * time.Second

// restartStreamLeader kills (-9) the leader of stream (any node when none
// names one) and starts it again on its data directory, and returns once
// every node answers JetStream requests and all three name the same
// leader of the stream. Not sooner: the restarted node names a leader from
// its own state at once (its old self, when it led), while the two others
// are still electing a new one, and the stream answers no request until
// they have.
func restartStreamLeader(ctx context.Context, c *natstest.Cluster, stream string) error {
	n := c.Nodes[0]
	for _, o := range c.Nodes {
		if l, err := o.StreamLeader(stream); err == nil && l != "" {
			for _, m := range c.Nodes {
				if m.Name == l {
					n = m
				}
			}
			break
		}
	}
	n.Kill()
	if err := n.Restart(); err != nil {
		return err
	}
	if err := c.WaitReady(60 * time.Second); err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		leader, err := agreedStreamLeader(c, stream)
		if err == nil && leader != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the nodes agree on no leader of %s 60s after %s's restart (%v)", stream, n.Name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agreedStreamLeader returns the leader of stream that every node names,
// or "" when they do not agree or one names none.
func agreedStreamLeader(c *natstest.Cluster, stream string) (string, error) {
	leader := ""
	for i, n := range c.Nodes {
		l, err := n.StreamLeader(stream)
		if err != nil {
			return "", err
		}
		if l == "" || (i > 0 && l != leader) {
			return "", nil
		}
		leader = l
	}
	return leader, nil
}

// multiProxy is the network of a client that reaches every node through a
// fault proxy of its own: each fault hits all of them, so that a client
// cannot step around it by switching nodes.
type multiProxy []*faultproxy.Proxy

func (ps multiProxy) each(f func(chaos.Network)) {
	for _, p := range ps {
		f(chaos.ProxyNetwork(p))
	}
}

func (ps multiProxy) Delay(d time.Duration) { ps.each(func(n chaos.Network) { n.Delay(d) }) }
func (ps multiProxy) Cut()                  { ps.each(chaos.Network.Cut) }
func (ps multiProxy) DropReply()            { ps.each(chaos.Network.DropReply) }
func (ps multiProxy) Heal()                 { ps.each(chaos.Network.Heal) }
