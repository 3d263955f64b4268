package testkit

import (
	"testing"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
)

// NewProxy starts a fault-injecting proxy on a free loopback port in front of
// target (host:port), closed when the test ends.
func NewProxy(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatalf("testkit: proxy to %s: %v", target, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
