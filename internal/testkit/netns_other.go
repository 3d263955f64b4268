//go:build !linux

package testkit

import (
	"context"
	"errors"
	"net"
	"testing"
)

// Netns is a Linux network namespace; elsewhere NewNetns skips the test.
type Netns struct {
	Name, HostDev, NSDev, HostIP, NSIP string
}

// NewNetns skips t: network namespaces exist on Linux only.
func NewNetns(t testing.TB) *Netns {
	t.Skip("network namespaces exist on Linux only")
	return nil
}

// Cut does nothing outside Linux.
func (n *Netns) Cut() {}

// Heal does nothing outside Linux.
func (n *Netns) Heal() {}

// DialContext fails outside Linux.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return nil, errors.New("network namespaces exist on Linux only")
}
