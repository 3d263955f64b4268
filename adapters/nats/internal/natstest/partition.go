package natstest

import (
	"testing"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
)

// Links are the fault proxies that carry every route of a cluster started
// by NewPartitionable: one per ordered pair of nodes, the one node `from`
// dials to reach node `to`'s cluster port. Client connections do not go
// through them.
type Links struct {
	n       int
	proxies map[[2]int]*faultproxy.Proxy
}

// NewPartitionable starts a cluster of t's own (as New does) whose routes
// all go through Links, so that a test can cut nodes off from each other
// while every process keeps running and serving its clients.
func NewPartitionable(t testing.TB, cfg Config) (*Cluster, *Links) {
	t.Helper()
	l := &Links{n: cfg.Nodes, proxies: map[[2]int]*faultproxy.Proxy{}}
	cfg.routeVia = func(from, to int, target string) (string, error) {
		p, err := faultproxy.Start(target)
		if err != nil {
			return "", err
		}
		l.proxies[[2]int{from, to}] = p
		return p.Addr(), nil
	}
	t.Cleanup(func() {
		for _, p := range l.proxies {
			_ = p.Close()
		}
	})
	return New(t, cfg), l
}

// Isolate cuts node i (an index into Cluster.Nodes) off from every other
// node, as a network partition does: the bytes of its routes, both ways,
// are held (sent, never delivered, connections left open), and new route
// connections to or from it are refused. Clients connected to node i still
// reach it.
func (l *Links) Isolate(i int) {
	for j := 0; j < l.n; j++ {
		if j == i {
			continue
		}
		for _, p := range []*faultproxy.Proxy{l.proxies[[2]int{i, j}], l.proxies[[2]int{j, i}]} {
			p.RefuseNew(true)
			p.Hold(faultproxy.Upstream)
			p.Hold(faultproxy.Downstream)
		}
	}
}

// Heal ends every partition: held bytes are delivered, in order, and new
// route connections are accepted again.
func (l *Links) Heal() {
	for _, p := range l.proxies {
		p.Heal()
	}
}
