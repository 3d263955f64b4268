package chaos

import (
	"time"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
)

// ProxyNetwork injects the runner's network faults through p.
func ProxyNetwork(p *faultproxy.Proxy) Network { return proxyNetwork{p} }

type proxyNetwork struct{ p *faultproxy.Proxy }

// Delay splits d between the two directions, so a round trip takes d longer.
func (n proxyNetwork) Delay(d time.Duration) {
	n.p.SetLatency(faultproxy.Upstream, d/2)
	n.p.SetLatency(faultproxy.Downstream, d-d/2)
}

func (n proxyNetwork) Cut()       { n.p.CutAll() }
func (n proxyNetwork) DropReply() { n.p.DropNextReply() }
func (n proxyNetwork) Heal()      { n.p.Heal() }

// ProxyNetworks injects each fault through every one of ps at once: the
// network of clients that reach several servers (the members of a
// cluster, a lock server and a store's), so that no client steps around a
// fault by switching servers.
func ProxyNetworks(ps ...*faultproxy.Proxy) Network { return proxyNetworks(ps) }

type proxyNetworks []*faultproxy.Proxy

func (ps proxyNetworks) each(f func(Network)) {
	for _, p := range ps {
		f(ProxyNetwork(p))
	}
}

func (ps proxyNetworks) Delay(d time.Duration) { ps.each(func(n Network) { n.Delay(d) }) }
func (ps proxyNetworks) Cut()                  { ps.each(Network.Cut) }
func (ps proxyNetworks) DropReply()            { ps.each(Network.DropReply) }
func (ps proxyNetworks) Heal()                 { ps.each(Network.Heal) }
