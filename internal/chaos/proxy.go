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
