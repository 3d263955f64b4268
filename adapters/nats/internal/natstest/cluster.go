// Package natstest gives the tests of adapters/nats real nats-server
// processes: a binary of Version built from the Go module proxy and cached
// (binary.go), started as throwaway processes on free loopback ports, one
// node or a three-node JetStream cluster, which tests can kill (-9), stop
// and restart.
package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config shapes a Cluster.
type Config struct {
	// Nodes is the number of servers: 1 (no cluster block) or more.
	Nodes int
	// SyncAlways sets JetStream's sync_interval to always: every write is
	// fsynced before it is acknowledged. Otherwise the server's default
	// (a sync every two minutes) applies.
	SyncAlways bool
	// Monitor gives every node an HTTP monitoring port on 127.0.0.1, for
	// what only the node itself can tell (Node.StreamLeader).
	Monitor bool

	// routeVia, when set, gives the address node from dials to reach node
	// to's cluster port (target) instead of the port itself, and the nodes
	// advertise no route address of their own, so that every route goes
	// where routeVia says (NewPartitionable).
	routeVia func(from, to int, target string) (string, error)
}

// Node is one nats-server process.
type Node struct {
	Name string
	Port int // client port on 127.0.0.1

	monitor int // HTTP monitoring port on 127.0.0.1; 0 without Config.Monitor

	conf string
	log  string
	bin  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a set of nats-server processes in one directory.
type Cluster struct {
	Nodes []*Node
	dir   string
}

// Start writes the configuration of cfg.Nodes servers under dir, starts them
// and waits until JetStream answers on every one. The free ports it picks
// were free a moment before the servers bind them, and another test's
// server may take one in between; a node that exits because its address is
// in use makes Start try again, on new ports, up to three times.
func Start(dir string, cfg Config) (*Cluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.Nodes < 1 {
		cfg.Nodes = 1
	}
	for attempt := 1; ; attempt++ {
		c, err := startOnce(dir, cfg, bin)
		if err == nil || attempt == 3 || !errors.Is(err, errAddrInUse) {
			return c, err
		}
		for i := 1; i <= cfg.Nodes; i++ { // the failed attempt's state
			_ = os.RemoveAll(filepath.Join(dir, fmt.Sprintf("n%d", i)))
			_ = os.Remove(filepath.Join(dir, fmt.Sprintf("n%d.log", i)))
		}
	}
}

// errAddrInUse marks a node that exited because a port it was given was
// taken.
var errAddrInUse = errors.New("natstest: address in use")

func startOnce(dir string, cfg Config, bin string) (*Cluster, error) {
	ports, err := freePorts(3 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for i := 0; i < cfg.Nodes; i++ {
		var routes []string
		for j := 0; j < cfg.Nodes; j++ {
			addr := fmt.Sprintf("127.0.0.1:%d", ports[cfg.Nodes+j])
			if cfg.routeVia != nil {
				if j == i {
					continue
				}
				if addr, err = cfg.routeVia(i, j, addr); err != nil {
					return nil, err
				}
			}
			routes = append(routes, "nats-route://"+addr)
		}
		n := &Node{Name: fmt.Sprintf("n%d", i+1), Port: ports[i], bin: bin}
		store := filepath.Join(dir, n.Name)
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: %s\nlisten: \"127.0.0.1:%d\"\n", n.Name, n.Port)
		if cfg.Monitor {
			n.monitor = ports[2*cfg.Nodes+i]
			fmt.Fprintf(&b, "http: \"127.0.0.1:%d\"\n", n.monitor)
		}
		// fencetest stores a 1 MiB value; the default limit, 1 MB, is
		// below it with the headers and subject (docs/nats.md).
		b.WriteString("max_payload: 2MB\n")
		fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", store)
		if cfg.SyncAlways {
			b.WriteString("  sync_interval: always\n")
		}
		b.WriteString("}\n")
		if cfg.Nodes > 1 {
			fmt.Fprintf(&b, "cluster {\n  name: fencekit\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n", ports[cfg.Nodes+i], strings.Join(routes, ", "))
			if cfg.routeVia != nil {
				// A node tells the others the route address it advertises,
				// and they dial it when they have no route to it yet: port
				// 1 refuses, so no route ever bypasses routeVia. Clients are
				// told no other node's address either.
				b.WriteString("  advertise: \"127.0.0.1:1\"\n  no_advertise: true\n")
			}
			b.WriteString("}\n")
		}
		n.conf = filepath.Join(dir, n.Name+".conf")
		n.log = filepath.Join(dir, n.Name+".log")
		if err := writeFile(n.conf, b.String()); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := n.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitReady(60 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// URLs are the client URLs of every node.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.URL()
	}
	return out
}

// URL is the node's client URL.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// Addr is the node's client host:port.
func (n *Node) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("natstest: %s is running", n.Name)
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("natstest: start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	return nil
}

// Kill ends the node with SIGKILL, as a crash would, and waits for it.
func (n *Node) Kill() { n.signal(syscall.SIGKILL) }

// Stop ends the node with SIGTERM (a clean shutdown) and waits for it.
func (n *Node) Stop() { n.signal(syscall.SIGTERM) }

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd, n.done = nil, nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Pause freezes the node's process (SIGSTOP), as a stalled VM or a long GC
// pause would: its connections stay open but it answers nothing.
func (n *Node) Pause() error { return n.sendSignal(syscall.SIGSTOP) }

// Resume lets a paused node run again (SIGCONT).
func (n *Node) Resume() error { return n.sendSignal(syscall.SIGCONT) }

func (n *Node) sendSignal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("natstest: %s is not running", n.Name)
	}
	return n.cmd.Process.Signal(sig)
}

// StreamLeader returns the leader of the stream named stream (in any
// account) as the node itself sees it, from its monitoring endpoint (/jsz;
// Config.Monitor): the node's own name while it believes it leads, "" while
// it knows of no leader. A node answers reads of the stream only while it
// believes it leads, so this is how a test learns that a deposed leader has
// stepped down. Asking through a client instead gets whichever node answers
// first, which need not be this one.
func (n *Node) StreamLeader(stream string) (string, error) {
	if n.monitor == 0 {
		return "", fmt.Errorf("natstest: %s has no monitoring port (Config.Monitor)", n.Name)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz?streams=true", n.monitor))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("natstest: %s /jsz: %s", n.Name, resp.Status)
	}
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster *struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return "", fmt.Errorf("natstest: %s /jsz: %w", n.Name, err)
	}
	for _, a := range jsz.Accounts {
		for _, st := range a.Streams {
			if st.Name == stream {
				if st.Cluster == nil {
					return "", nil
				}
				return st.Cluster.Leader, nil
			}
		}
	}
	return "", fmt.Errorf("natstest: %s has no stream %s", n.Name, stream)
}

// Restart starts a stopped or killed node again, on its data directory.
func (n *Node) Restart() error { return n.start() }

// exited reports whether the node was started and its process has ended
// without Kill or Stop: it crashed, or refused its configuration.
func (n *Node) exited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// Running reports whether the node's process is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Close kills every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Log returns the node's log, for a failing test's message.
func (n *Node) Log() string {
	b, _ := os.ReadFile(n.log)
	return string(b)
}

// WaitReady waits until every running node answers a JetStream account
// info request (in a cluster: once the meta leader is elected).
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		var last error
		for {
			last = ping(n.URL())
			if last == nil {
				break
			}
			if n.exited() {
				log := n.Log()
				err := fmt.Errorf("natstest: %s exited: %v\n%s", n.Name, last, tail(log, 2000))
				if strings.Contains(log, "address already in use") {
					err = errors.Join(errAddrInUse, err)
				}
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("natstest: %s not ready: %v\n%s", n.Name, last, tail(n.Log(), 2000))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func ping(url string) error {
	nc, err := natsgo.Connect(url, natsgo.Timeout(time.Second), natsgo.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("natstest: free port"), err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
