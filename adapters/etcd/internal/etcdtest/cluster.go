// Package etcdtest starts real etcd clusters for the adapter's tests: three
// members of the embedded server (go.etcd.io/etcd/server/v3/embed), each on
// free loopback ports with a data directory of its own, in the test's own
// process. It is imported only by tests and by fencelab's tests, so the
// server's code is never linked into a program that uses the adapter.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Size is the number of members a cluster has.
const Size = 3

// Timing of the test clusters: etcd's defaults, a 100 ms heartbeat and a
// 1 s election timeout, which a loaded CI machine running the race detector
// does not mistake for a dead leader. The server's minimum lease TTL follows
// from them: 1.5 election timeouts, rounded up to a whole second, is 2 s.
const (
	TickMs     = 100
	ElectionMs = 1000
)

// StartTimeout bounds how long a cluster (or one restarted member) may take
// to become ready.
const StartTimeout = 60 * time.Second

// Member is one etcd server of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string
	Dir       string

	mu   sync.Mutex
	cfg  *embed.Config
	etcd *embed.Etcd // nil while stopped
}

// Cluster is a set of embedded etcd members that formed one cluster.
type Cluster struct {
	Members []*Member
}

// Start starts a new three-member cluster under dir and waits until it has a
// leader. Ports are picked free a moment before the members bind them; when
// one was taken meanwhile, Start tries again with new ones.
func Start(dir string) (*Cluster, error) {
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := start(filepath.Join(dir, "try"+strconv.Itoa(attempt)))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

func start(dir string) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	for i := 0; i < Size; i++ {
		cp, pp, err := freePorts()
		if err != nil {
			return nil, err
		}
		m := &Member{
			Name:      "m" + strconv.Itoa(i),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(cp),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(pp),
			Dir:       filepath.Join(dir, "m"+strconv.Itoa(i)),
		}
		if err := os.MkdirAll(m.Dir, 0o700); err != nil {
			return nil, err
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		cfg, err := config(m, strings.Join(initial, ","))
		if err != nil {
			return nil, err
		}
		m.cfg = cfg
	}
	if err := c.startMembers(c.Members); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freePorts returns two loopback ports that were free a moment ago.
func freePorts() (int, int, error) {
	var ports [2]int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], nil
}

func config(m *Member, initial string) (*embed.Config, error) {
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(m.PeerURL)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = initial
	cfg.InitialClusterToken = "fencekit-test"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs, cfg.ElectionMs = TickMs, ElectionMs
	// The data survives a clean stop without fsync (the page cache keeps
	// it), which is all the restart test needs; fsync on a shared CI
	// machine only makes elections flaky.
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(m.Dir, "etcd.log")}
	return cfg, nil
}

// startMembers starts ms at once (a new cluster needs a quorum to become
// ready) and waits until each is ready.
func (c *Cluster) startMembers(ms []*Member) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.start()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd != nil {
		return nil
	}
	e, err := embed.StartEtcd(m.cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdtest: %s failed: %w", m.Name, err)
	case <-time.After(StartTimeout):
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("etcdtest: %s not ready within %v", m.Name, StartTimeout)
	}
	m.etcd = e
	return nil
}

// Running reports whether the member is started.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil
}

// Server returns the member's running embedded server, or nil.
func (m *Member) Server() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// Stop stops the member, as a process that was killed would stop serving:
// its clients lose their connections and the others elect a new leader if it
// led. Its data directory stays.
func (m *Member) Stop() {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		e.Server.HardStop()
		e.Close()
	}
}

// Restart starts a stopped member again from its data directory.
func (c *Cluster) Restart(ms ...*Member) error {
	for _, m := range ms {
		m.mu.Lock()
		m.cfg.ClusterState = embed.ClusterStateFlagExisting
		m.mu.Unlock()
	}
	return c.startMembers(ms)
}

// Close stops every member.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Stop()
		}()
	}
	wg.Wait()
}

// Endpoints returns the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Leader returns the member that leads, waiting up to timeout for the
// running members to agree on one.
func (c *Cluster) Leader(ctx context.Context, timeout time.Duration) (*Member, error) {
	deadline := time.Now().Add(timeout)
	for {
		var lead *Member
		agree := true
		for _, m := range c.Members {
			e := m.Server()
			if e == nil {
				continue
			}
			id := e.Server.Leader()
			if id == 0 {
				agree = false
				break
			}
			for _, o := range c.Members {
				if oe := o.Server(); oe != nil && oe.Server.MemberID() == id {
					if lead != nil && lead != o {
						agree = false
					}
					lead = o
				}
			}
		}
		if agree && lead != nil {
			return lead, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("etcdtest: no leader within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Isolate cuts m off from every other member, both ways, inside the
// members' Raft transports: messages between m and the rest are dropped as
// by a network partition, while m's clients still reach m. Heal undoes it.
func (c *Cluster) Isolate(m *Member) {
	c.cut(m, true)
}

// Heal ends an Isolate.
func (c *Cluster) Heal(m *Member) {
	c.cut(m, false)
}

func (c *Cluster) cut(m *Member, on bool) {
	me := m.Server()
	for _, o := range c.Members {
		oe := o.Server()
		if o == m || oe == nil || me == nil {
			continue
		}
		if on {
			me.Server.CutPeer(oe.Server.MemberID())
			oe.Server.CutPeer(me.Server.MemberID())
		} else {
			me.Server.MendPeer(oe.Server.MemberID())
			oe.Server.MendPeer(me.Server.MemberID())
		}
	}
}

// NewClient returns a client of the given endpoints with the client
// library's defaults, as an application would make one.
func NewClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}
