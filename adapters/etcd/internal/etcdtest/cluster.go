// Package etcdtest starts real etcd clusters for the adapter's tests: three
// members of the embedded server (go.etcd.io/etcd/server/v3/embed), each a
// process of its own (the command in ./member, built on first use without
// the race detector) on free loopback ports, with a data directory of its
// own. It is imported only by tests, so the server's code is never linked
// into a program that uses the adapter.
package etcdtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Size is the number of members a cluster has.
const Size = 3

// Timing of the test clusters: etcd's defaults, a 100 ms heartbeat and a
// 1 s election timeout, which a loaded CI machine does not mistake for a
// dead leader. The server's minimum lease TTL follows from them: 1.5
// election timeouts, rounded up to a whole second, is 2 s.
const (
	TickMs     = 100
	ElectionMs = 1000
)

// StartTimeout bounds how long a cluster (or one restarted member) may take
// to become ready, not counting the build of the member command.
const StartTimeout = 60 * time.Second

// Member is one etcd server of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string
	Dir       string

	initial string

	mu    sync.Mutex
	state string // "new" until the first start, then "existing"
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// Cluster is a set of etcd members that formed one cluster.
type Cluster struct {
	Members []*Member
}

// Start starts a new three-member cluster under dir and waits until every
// member serves. Ports are picked free a moment before the members bind
// them; when one was taken meanwhile, Start tries again with new ones.
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
	if _, err := memberBinary(); err != nil {
		return nil, err
	}
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
			state:     "new",
		}
		if err := os.MkdirAll(m.Dir, 0o700); err != nil {
			return nil, err
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.initial = strings.Join(initial, ",")
	}
	if err := c.startMembers(c.Members); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

var build struct {
	once sync.Once
	path string
	err  error
}

// memberBinary builds the member command once per test process, with the
// go command that runs the tests, without -race.
func memberBinary() (string, error) {
	build.once.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			build.err = errors.New("etcdtest: cannot locate the member command's source")
			return
		}
		dir, err := os.MkdirTemp("", "fencekit-etcdmember-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "member")
		cmd := exec.Command(goCommand(), "build", "-o", build.path, "./member")
		cmd.Dir = filepath.Dir(file)
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("etcdtest: build the member command: %v\n%s", err, out)
		}
	})
	return build.path, build.err
}

// goCommand is the go command of the toolchain running the tests.
func goCommand() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
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

// startMembers starts ms at once (a new cluster needs a quorum to become
// ready) and waits until each serves.
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
	bin, err := memberBinary()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return nil
	}
	cmd := exec.Command(bin,
		"-name", m.Name, "-dir", m.Dir, "-client-url", m.ClientURL, "-peer-url", m.PeerURL,
		"-initial-cluster", m.initial, "-state", m.state,
		"-tick-ms", strconv.Itoa(TickMs), "-election-ms", strconv.Itoa(ElectionMs))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := os.Create(filepath.Join(m.Dir, "member.stderr"))
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	out := bufio.NewScanner(stdout)
	ready := make(chan bool, 1)
	go func() { ready <- out.Scan() && out.Text() == "ready" }()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			msg, _ := os.ReadFile(filepath.Join(m.Dir, "member.stderr"))
			return fmt.Errorf("etcdtest: %s exited before it was ready: %s", m.Name, msg)
		}
	case <-time.After(StartTimeout):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("etcdtest: %s not ready within %v", m.Name, StartTimeout)
	}
	m.cmd, m.stdin, m.out, m.state = cmd, stdin, out, "existing"
	return nil
}

// Running reports whether the member's process is running.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// Stop kills the member's process (SIGKILL): its clients lose their
// connections and the others elect a new leader if it led. Its data
// directory stays.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	_ = m.stdin.Close()
	m.cmd, m.stdin, m.out = nil, nil, nil
}

// Halt stops the member's etcd server but leaves its process, and its
// client port, up: calls that reach it are answered "etcdserver: server
// stopped" (as by a member removed from the cluster, or one whose server
// stopped on its own) until Shutdown or Stop ends the process. A leader
// hands its leadership over first.
func (m *Member) Halt() error { return m.command("halt") }

// ShutdownTimeout bounds a graceful Shutdown before the member is killed.
const ShutdownTimeout = 30 * time.Second

// Shutdown stops the member gracefully, as an operator's rolling restart
// does: its standard input closes, so the member command closes the embedded
// server (a leader hands its leadership over first, and calls in flight are
// answered "etcdserver: server stopped") and exits. A member still running
// after ShutdownTimeout is killed. Its data directory stays.
func (m *Member) Shutdown() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return nil
	}
	_ = m.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(ShutdownTimeout):
		_ = m.cmd.Process.Kill()
		<-done
		err = fmt.Errorf("etcdtest: %s did not shut down within %v; killed", m.Name, ShutdownTimeout)
	}
	m.cmd, m.stdin, m.out = nil, nil, nil
	return err
}

// command sends one line to the member and waits for its answer.
func (m *Member) command(line string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return fmt.Errorf("etcdtest: %s is stopped", m.Name)
	}
	if _, err := fmt.Fprintln(m.stdin, line); err != nil {
		return err
	}
	if !m.out.Scan() {
		return fmt.Errorf("etcdtest: %s: no answer to %q", m.Name, line)
	}
	if ans := m.out.Text(); ans != "ok" {
		return fmt.Errorf("etcdtest: %s: %s", m.Name, ans)
	}
	return nil
}

// Restart starts stopped members again from their data directories.
func (c *Cluster) Restart(ms ...*Member) error {
	return c.startMembers(ms)
}

// Close kills every member.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Stop()
	}
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
	cli, err := NewClient(c.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	for {
		if m := c.agreedLeader(ctx, cli); m != nil {
			return m, nil
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

// agreedLeader asks every running member whom it follows, and returns that
// member when all agree.
func (c *Cluster) agreedLeader(ctx context.Context, cli *clientv3.Client) *Member {
	ids := map[uint64]*Member{}
	var lead uint64
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.ClientURL)
		cancel()
		if err != nil || st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return nil
		}
		lead = st.Leader
		ids[st.Header.MemberId] = m
	}
	return ids[lead]
}

// Isolate cuts m off from every other member, both ways, inside the
// members' Raft transports: messages between m and the rest are dropped as
// by a network partition, while m's clients still reach m. Heal undoes it.
func (c *Cluster) Isolate(m *Member) error { return c.cut(m, "cut") }

// Heal ends an Isolate.
func (c *Cluster) Heal(m *Member) error { return c.cut(m, "mend") }

func (c *Cluster) cut(m *Member, verb string) error {
	var errs []error
	for _, o := range c.Members {
		if o == m || !o.Running() {
			continue
		}
		errs = append(errs, m.command(verb+" "+o.Name), o.command(verb+" "+m.Name))
	}
	return errors.Join(errs...)
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
