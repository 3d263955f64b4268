package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyLineServer answers every line it reads with "ok:<line>\n" and counts the
// lines it executed.
type proxyLineServer struct {
	ln       net.Listener
	executed atomic.Int64
	wg       sync.WaitGroup
}

func newProxyLineServer(t *testing.T) *proxyLineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &proxyLineServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					s.executed.Add(1)
					if _, err := io.WriteString(c, "ok:"+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *proxyLineServer) addr() string { return s.ln.Addr().String() }

type proxyLineClient struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func proxyDial(t *testing.T, addr string) *proxyLineClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &proxyLineClient{t: t, c: c, rd: bufio.NewReader(c)}
}

// call sends line and waits up to timeout for the reply.
func (l *proxyLineClient) call(line string, timeout time.Duration) (string, error) {
	_ = l.c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(l.c, line+"\n"); err != nil {
		return "", err
	}
	reply, err := l.rd.ReadString('\n')
	return strings.TrimSuffix(reply, "\n"), err
}

func proxyMustCall(t *testing.T, l *proxyLineClient, line string) {
	t.Helper()
	got, err := l.call(line, 10*time.Second)
	if err != nil || got != "ok:"+line {
		t.Fatalf("call %q: %q, %v", line, got, err)
	}
}

func proxyIsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxyForwards(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("proxy listens on %s, want loopback", p.Addr())
	}
	a, b := proxyDial(t, p.Addr()), proxyDial(t, p.Addr())
	for i := 0; i < 3; i++ {
		proxyMustCall(t, a, "a")
		proxyMustCall(t, b, "b")
	}
	big := strings.Repeat("x", 200<<10) // several chunks each way
	proxyMustCall(t, a, big)
	if st := p.Stats(); st.Accepted != 2 || st.Open != 2 {
		t.Fatalf("stats %+v, want 2 accepted and open", st)
	}
}

func TestProxyLatency(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm")
	const lat = 150 * time.Millisecond
	for _, dir := range []Direction{Upstream, Downstream} {
		p.SetLatency(dir, lat)
		start := time.Now()
		proxyMustCall(t, c, dir.String())
		if took := time.Since(start); took < lat {
			t.Errorf("%s latency %v: call took only %v", dir, lat, took)
		}
		p.SetLatency(dir, 0)
	}

	// Lowering the latency releases a chunk that is already waiting.
	p.SetLatency(Downstream, time.Hour)
	res := make(chan error, 1)
	go func() { _, err := c.call("late", 30*time.Second); res <- err }()
	proxyWaitFor(t, "the request to execute", func() bool { return srv.executed.Load() == 4 })
	p.SetLatency(Downstream, 0)
	if err := <-res; err != nil {
		t.Fatalf("reply after the latency was lowered: %v", err)
	}
}

func TestProxyHoldAndUnhold(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm")

	p.Hold(Downstream)
	_, err := c.call("held", 200*time.Millisecond)
	if !proxyIsTimeout(err) {
		t.Fatalf("held reply: got %v, want a timeout", err)
	}
	if srv.executed.Load() != 2 {
		t.Fatalf("the server executed %d requests, want 2: holding replies must not hold requests", srv.executed.Load())
	}
	p.Unhold(Downstream)
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := c.rd.ReadString('\n')
	if err != nil || got != "ok:held\n" {
		t.Fatalf("after Unhold: %q, %v", got, err)
	}

	p.Hold(Upstream)
	_, err = c.call("unsent", 200*time.Millisecond)
	if !proxyIsTimeout(err) {
		t.Fatalf("held request: got %v, want a timeout", err)
	}
	if n := srv.executed.Load(); n != 2 {
		t.Fatalf("the server executed a held request (%d)", n)
	}
	p.Heal()
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err = c.rd.ReadString('\n')
	if err != nil || got != "ok:unsent\n" {
		t.Fatalf("after Heal: %q, %v", got, err)
	}
}

func TestProxyDropNextReply(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm")

	dropped := p.DropNextReply()
	got, err := c.call("ambiguous", 10*time.Second)
	if err == nil || proxyIsTimeout(err) {
		t.Fatalf("dropped reply: got %q, %v; want a broken connection", got, err)
	}
	<-dropped
	if n := srv.executed.Load(); n != 2 {
		t.Fatalf("the server executed %d requests, want 2: the dropped request must have run", n)
	}
	st := p.Stats()
	if st.Dropped != 1 || st.Cut != 1 {
		t.Fatalf("stats %+v, want 1 dropped and 1 cut", st)
	}
	// Only one reply is dropped; a new connection works.
	c2 := proxyDial(t, p.Addr())
	proxyMustCall(t, c2, "after")
	proxyMustCall(t, c2, "again")
}

func TestProxyDropGoesToTheNextRequest(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	idle := proxyDial(t, p.Addr())
	proxyMustCall(t, idle, "warm")

	// A connection that sends nothing does not take an armed drop; the
	// first one that forwards a request does.
	dropped := p.DropNextReply()
	p.Hold(Downstream)
	first := proxyDial(t, p.Addr())
	res := make(chan error, 1)
	go func() { _, err := first.call("cut-before-reply", 10*time.Second); res <- err }()
	proxyWaitFor(t, "the request to execute", func() bool { return srv.executed.Load() == 2 })
	// Cut before its reply came through: the drop did not happen, so it
	// passes to the next request.
	p.CutAll()
	if err := <-res; err == nil {
		t.Fatal("a cut connection delivered a reply")
	}
	p.Unhold(Downstream)
	select {
	case <-dropped:
		t.Fatal("drop reported although no reply was dropped")
	default:
	}
	idle2 := proxyDial(t, p.Addr())
	if _, err := idle2.call("takes-the-drop", 10*time.Second); err == nil {
		t.Fatal("the re-armed drop did not hit the next request")
	}
	<-dropped
	if st := p.Stats(); st.Dropped != 1 {
		t.Fatalf("stats %+v, want 1 dropped", st)
	}
	// One drop, one connection: the next one works.
	proxyMustCall(t, proxyDial(t, p.Addr()), "fine")
}

func TestProxyCutAllAndRefuse(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm")

	if n := p.CutAll(); n != 1 {
		t.Fatalf("CutAll cut %d connections, want 1", n)
	}
	if _, err := c.call("after-cut", 10*time.Second); err == nil || proxyIsTimeout(err) {
		t.Fatalf("call on a cut connection: %v, want a broken connection", err)
	}

	p.RefuseNew(true)
	// The proxy accepts and resets at once: the dial or the first call fails.
	if r, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second); err == nil {
		l := &proxyLineClient{t: t, c: r, rd: bufio.NewReader(r)}
		_, err = l.call("refused", 10*time.Second)
		_ = r.Close()
		if err == nil || proxyIsTimeout(err) {
			t.Fatalf("call on a refused connection: %v, want a broken connection", err)
		}
	}
	proxyWaitFor(t, "the refusal to be counted", func() bool { return p.Stats().Refused == 1 })
	p.RefuseNew(false)
	ok := proxyDial(t, p.Addr())
	proxyMustCall(t, ok, "welcome-back")
}

// TestProxyCutAllCutsAConnectionStillDialling: a connection the proxy
// accepted before CutAll but had not yet connected to the target (a pool's
// new connection at the moment of the cut) is cut too, not forwarded.
func TestProxyCutAllCutsAConnectionStillDialling(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	dialling := make(chan struct{})
	release := make(chan struct{})
	p.mu.Lock()
	p.dial = func(target string) (net.Conn, error) {
		close(dialling)
		<-release
		return dialTarget(target)
	}
	p.mu.Unlock()
	r, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	<-dialling
	if n := p.CutAll(); n != 0 {
		t.Fatalf("CutAll cut %d open connections, want 0 (the one accepted is still dialling)", n)
	}
	close(release)
	c := &proxyLineClient{t: t, c: r, rd: bufio.NewReader(r)}
	if _, err := c.call("after-cut", 10*time.Second); err == nil || proxyIsTimeout(err) {
		t.Fatalf("call on a connection accepted before the cut: %v, want a broken connection", err)
	}
	if n := srv.executed.Load(); n != 0 {
		t.Fatalf("the target executed %d lines sent on a cut connection", n)
	}
	proxyWaitFor(t, "the cut to be counted", func() bool { return p.Stats().Cut == 1 })
}

func TestProxyCloseEndsConnections(t *testing.T) {
	srv := newProxyLineServer(t)
	p, err := Start(srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm")
	p.Hold(Downstream)
	dropped := p.DropNextReply()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	<-dropped // closed by Close, not leaked
	if _, err := c.call("closed", 10*time.Second); err == nil || proxyIsTimeout(err) {
		t.Fatalf("call through a closed proxy: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("a closed proxy still accepts connections")
	}
	<-p.DropNextReply() // after Close: already closed
	if _, err := Start("no-port"); err == nil {
		t.Fatal("StartProxy accepted a target without a port")
	}
}

// waitFor polls cond every few milliseconds for up to 10 s.
func proxyWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestProxyDial(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	ctx := context.Background()
	for _, addr := range []string{srv.addr(), p.Addr()} {
		conn, err := p.Dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("Dial(%q): %v", addr, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		proxyMustCall(t, &proxyLineClient{t: t, c: conn, rd: bufio.NewReader(conn)}, "via-dial")
	}
	if st := p.Stats(); st.Accepted != 2 {
		t.Fatalf("stats %+v: the dials did not go through the proxy", st)
	}
	for _, bad := range [][2]string{{"tcp", "127.0.0.1:1"}, {"unix", srv.addr()}} {
		if conn, err := p.Dial(ctx, bad[0], bad[1]); !errors.Is(err, ErrWrongTarget) {
			if conn != nil {
				_ = conn.Close()
			}
			t.Fatalf("Dial(%q, %q): %v; want an error matching ErrWrongTarget", bad[0], bad[1], err)
		}
	}
}

func TestProxyCountsBytesEvenWhenHeld(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm") // 5 bytes up, 8 down
	if st := p.Stats(); st.UpBytes != 5 || st.DownBytes != 8 {
		t.Fatalf("stats %+v, want 5 bytes up and 8 down", st)
	}
	p.Hold(Upstream)
	go func() { _, _ = c.call("held", 10*time.Second) }()
	proxyWaitFor(t, "the held request to be counted", func() bool { return p.Stats().UpBytes == 10 })
	if n := srv.executed.Load(); n != 1 {
		t.Fatalf("the server executed %d requests, want 1: a held request was delivered", n)
	}
}

// TestProxyHoldRepliesAfter: the replies to the first n requests pass, the
// next request reaches the server but its reply is held, and Heal
// delivers it.
func TestProxyHoldRepliesAfter(t *testing.T) {
	srv := newProxyLineServer(t)
	p := newProxy(t, srv.addr())
	c := proxyDial(t, p.Addr())
	proxyMustCall(t, c, "warm")

	p.HoldRepliesAfter(2)
	proxyMustCall(t, c, "read1")
	proxyMustCall(t, c, "read2")
	_, err := c.call("write", 200*time.Millisecond)
	if !proxyIsTimeout(err) {
		t.Fatalf("the third request's reply: got %v, want a timeout (held)", err)
	}
	if n := srv.executed.Load(); n != 4 {
		t.Fatalf("the server executed %d requests, want 4: the held reply's request must have run", n)
	}
	p.Heal()
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := c.rd.ReadString('\n')
	if err != nil || got != "ok:write\n" {
		t.Fatalf("after Heal: %q, %v", got, err)
	}
	// Healed, it holds nothing any more.
	proxyMustCall(t, c, "after")

	p.HoldRepliesAfter(0)
	if _, err := c.call("at once", 200*time.Millisecond); !proxyIsTimeout(err) {
		t.Fatalf("HoldRepliesAfter(0): got %v, want the first reply held", err)
	}
}
