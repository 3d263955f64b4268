//go:build linux

package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Netns is a network namespace made for one test, joined to the host by a
// veth pair: the host side has HostIP, the namespace side NSIP, both in a
// /30 of 10.231.0.0/16 that no other test uses. A client dialing through
// DialContext lives in the namespace, so Cut separates it from a server on
// the host at the IP layer: packets are dropped, nothing is refused or
// reset, exactly as a network partition looks to both ends.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ip command. Where
// the sandbox refuses, NewNetns skips the test with the refusal.
type Netns struct {
	Name    string
	HostDev string
	NSDev   string
	HostIP  string
	NSIP    string
	t       testing.TB
}

// NewNetns creates the namespace and the veth pair, and removes both when
// t ends. A host blackhole route for the /30 (with a high metric) makes sure
// that nothing for these addresses ever leaves the machine, should the
// connected route go away.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if _, ok := setnsCall[runtime.GOARCH]; !ok {
		t.Skipf("network namespaces: setns(2) number unknown on %s", runtime.GOARCH)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("network namespaces: no ip command (apt-get install -y iproute2): %v", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	id := hex.EncodeToString(b[:])
	// 10.231.X.(4k) /30: host .4k+1, namespace .4k+2.
	x, k := int(b[0]), int(b[1]%63)
	n := &Netns{
		Name:    "fk" + id,
		HostDev: "fkh" + id,
		NSDev:   "fkn" + id,
		HostIP:  fmt.Sprintf("10.231.%d.%d", x, 4*k+1),
		NSIP:    fmt.Sprintf("10.231.%d.%d", x, 4*k+2),
		t:       t,
	}
	subnet := fmt.Sprintf("10.231.%d.%d/30", x, 4*k)
	if out, err := ipCmd("netns", "add", n.Name); err != nil {
		t.Skipf("network namespaces refused here: `ip netns add %s`: %v: %s", n.Name, err, out)
	}
	t.Cleanup(func() { _, _ = ipCmd("netns", "del", n.Name) })
	steps := [][]string{
		{"link", "add", n.HostDev, "type", "veth", "peer", "name", n.NSDev},
		{"link", "set", n.NSDev, "netns", n.Name},
		{"addr", "add", n.HostIP + "/30", "dev", n.HostDev},
		{"link", "set", n.HostDev, "up"},
		{"route", "add", "blackhole", subnet, "metric", "4000"},
		{"-n", n.Name, "addr", "add", n.NSIP + "/30", "dev", n.NSDev},
		{"-n", n.Name, "link", "set", n.NSDev, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
	}
	t.Cleanup(func() {
		_, _ = ipCmd("route", "del", "blackhole", subnet, "metric", "4000")
		_, _ = ipCmd("link", "del", n.HostDev) // also removes the peer
	})
	for _, s := range steps {
		if out, err := ipCmd(s...); err != nil {
			t.Skipf("network namespaces refused here: `ip %s`: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	n.waitReachable()
	return n
}

// Cut takes the namespace's end of the link down: from now on packets
// between the namespace and the host are dropped, silently.
func (n *Netns) Cut() {
	n.t.Helper()
	if out, err := ipCmd("-n", n.Name, "link", "set", n.NSDev, "down"); err != nil {
		n.t.Fatalf("testkit: cut %s: %v: %s", n.Name, err, out)
	}
}

// Heal brings the link up again and waits until the host answers.
func (n *Netns) Heal() {
	n.t.Helper()
	if out, err := ipCmd("-n", n.Name, "link", "set", n.NSDev, "up"); err != nil {
		n.t.Fatalf("testkit: heal %s: %v: %s", n.Name, err, out)
	}
	n.waitReachable()
}

// waitReachable waits until a connection from the namespace to a listener
// on HostIP goes through (the veth pair's carrier and the routes are up).
func (n *Netns) waitReachable() {
	n.t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(n.HostIP, "0"))
	if err != nil {
		n.t.Fatalf("testkit: listen on %s: %v", n.HostIP, err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		c, err := n.DialContext(ctx, "tcp", l.Addr().String())
		cancel()
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("testkit: %s cannot reach %s: %v", n.Name, l.Addr(), err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// DialContext dials addr from inside the namespace: the socket is created
// on a thread that has joined the namespace, and stays in it.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to the host namespace before it is unlocked;
		// if that fails it stays locked and dies with this goroutine.
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + n.Name)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("setns %s: %w", n.Name, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if setns(self) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// setnsCall is setns(2)'s number; the syscall package does not name it.
var setnsCall = map[string]uintptr{"amd64": 308, "arm64": 268, "riscv64": 268, "386": 346, "arm": 375, "ppc64le": 350, "s390x": 339}

func setns(f *os.File) error {
	nr, ok := setnsCall[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("setns: system call number unknown on %s", runtime.GOARCH)
	}
	if _, _, errno := syscall.Syscall(nr, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}

func ipCmd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
