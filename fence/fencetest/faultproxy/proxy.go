// Package faultproxy is a fault-injecting TCP proxy for tests: it sits
// between a client and a server on loopback and, on command, delays or holds
// bytes, drops a reply after the server has executed the request, cuts
// connections and refuses new ones. It knows no protocol, so it works in
// front of Redis, PostgreSQL or any request/response server.
//
// A client reaches the server through the proxy either by dialling Addr
// instead of the server's address, or by using Dial as its dial function
// (go-redis's Options.Dialer, pgx's ConnConfig.DialFunc), which leaves the
// client's configuration pointing at the real server.
//
// The package uses only the standard library. The fault kits
// fencetest.RunFaults and drivertest.RunFaults are built on it.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DialFunc is the dial function of go-redis (Options.Dialer), pgx
// (pgconn.DialFunc) and net.Dialer.DialContext. It is an alias, so a
// DialFunc can be assigned to any of them without a conversion.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// ErrWrongTarget means Dial was asked for an address that the proxy does not
// front. A client that dials several servers (a cluster client) needs one
// proxy per server.
var ErrWrongTarget = errors.New("faultproxy: dial to an address the proxy does not front")

// Direction names one half of a proxied connection.
type Direction int

const (
	// Upstream is client to server: the requests.
	Upstream Direction = iota
	// Downstream is server to client: the replies.
	Downstream
)

// String returns "upstream" or "downstream".
func (d Direction) String() string {
	if d == Upstream {
		return "upstream"
	}
	return "downstream"
}

// Proxy is a fault-injecting TCP proxy: it listens on a free loopback port and forwards every connection to a target, byte for byte,
// until told to misbehave. Per direction it can add latency or hold
// (black-hole) the bytes; it can drop the reply to the next request after the
// server has executed it and then cut that connection (an ambiguous outcome,
// as a timeout after the server acted); it can cut every open connection and
// refuse new ones.
//
// It knows nothing of any protocol. A "reply" is whatever the server sends
// first after the request bytes were forwarded, which is the reply for
// request/response protocols without pipelining (RESP, and PostgreSQL's
// extended query protocol once statements are prepared).
//
// All methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever a control changes
	conns    map[*proxyConn]struct{}
	latency  [2]time.Duration
	held     [2]bool
	holdIn   int  // with holdArm: request chunks to forward before Downstream is held
	holdArm  bool // HoldRepliesAfter is armed
	refuse   bool
	closed   bool
	drops    []chan struct{} // armed DropNextReply requests, oldest first
	accepted int
	refused  int
	cut      int
	cutGen   int // CutAll calls so far: a connection accepted before one is cut by it
	dropped  int
	// dial connects to the target; a test of this package replaces it to
	// hold a connection between its accept and its dial.
	dial  func(target string) (net.Conn, error)
	bytes [2]atomic.Int64 // bytes read, per direction
}

// Stats counts what a Proxy did.
type Stats struct {
	Accepted int // connections accepted and forwarded
	Refused  int // connections refused while RefuseNew was on
	Cut      int // connections cut by CutAll or after a dropped reply
	Dropped  int // replies dropped by DropNextReply
	Open     int // connections open now
	// UpBytes and DownBytes count the bytes read from clients (requests)
	// and from the server (replies), whether or not they were delivered:
	// UpBytes going up while Upstream is held shows that a request is on
	// its way and has not reached the server.
	UpBytes, DownBytes int64
}

// Start starts a Proxy on 127.0.0.1 and a free port in front of target
// (host:port). The caller must Close it.
func Start(target string) (*Proxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("proxy target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}, dial: dialTarget}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's host:port; point clients at it instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the host:port the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Dial connects to the proxy, and through it to its target, with the
// signature of a client library's dial hook (see DialFunc). addr must be
// Target (a client configured for the real server) or Addr; network must be
// TCP. Anything else is refused with an error matching ErrWrongTarget, so
// that a client never reaches the wrong server silently.
func (p *Proxy) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if !strings.HasPrefix(network, "tcp") || (addr != p.target && addr != p.Addr()) {
		return nil, fmt.Errorf("%w: %s %q; the proxy at %s fronts tcp %q", ErrWrongTarget, network, addr, p.Addr(), p.target)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.Addr())
}

// Close stops accepting, cuts every connection and waits for the proxy's
// goroutines to end. Closing twice is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	p.mu.Lock()
	for _, ch := range p.drops {
		close(ch)
	}
	p.drops = nil
	p.mu.Unlock()
	return err
}

// SetLatency delays every chunk of bytes in direction dir by d from the
// moment the proxy read it. The latency is applied when a chunk is due to be
// written, so lowering it also releases chunks that are already waiting.
// Zero removes it. Order within a connection is always kept.
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.update(func() { p.latency[dir] = max(d, 0) })
}

// Latency returns the latency set for dir.
func (p *Proxy) Latency(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency[dir]
}

// Hold black-holes direction dir: bytes are read and kept, nothing is
// delivered, connections stay open. Unhold delivers what was kept; CutAll
// discards it.
func (p *Proxy) Hold(dir Direction) { p.update(func() { p.held[dir] = true }) }

// Unhold ends Hold for dir and delivers the kept bytes, in order.
func (p *Proxy) Unhold(dir Direction) {
	p.update(func() {
		p.held[dir] = false
		if dir == Downstream {
			p.holdArm = false
		}
	})
}

// HoldRepliesAfter lets the replies to the next n requests through and
// holds every reply after them: the proxy forwards n chunks of request bytes
// as usual, and before it forwards the next one it holds Downstream (as Hold
// does), so that chunk's reply and all later ones are kept. A request is a
// chunk as the proxy reads it from a client, on any connection: this suits a
// client that sends each request in one write and waits for its reply before
// it sends the next (a read, then a conditional write). n = 0 is
// Hold(Downstream). Heal and Unhold(Downstream) disarm it.
func (p *Proxy) HoldRepliesAfter(n int) {
	p.update(func() {
		if n <= 0 {
			p.held[Downstream], p.holdArm = true, false
			return
		}
		p.holdIn, p.holdArm = n, true
	})
}

// countRequest counts a chunk of request bytes about to be forwarded, and
// holds Downstream when HoldRepliesAfter's count has run out.
func (p *Proxy) countRequest() {
	p.mu.Lock()
	armed := p.holdArm
	p.mu.Unlock()
	if !armed {
		return
	}
	p.update(func() {
		switch {
		case !p.holdArm:
		case p.holdIn > 0:
			p.holdIn--
		default:
			p.held[Downstream], p.holdArm = true, false
		}
	})
}

// RefuseNew makes the proxy close every new connection at once (on true)
// or accept them again (on false). Open connections are not touched.
func (p *Proxy) RefuseNew(on bool) { p.update(func() { p.refuse = on }) }

// DropNextReply arms one drop: the next connection that forwards request
// bytes to the server after this call gets its next reply discarded (the
// server executed the request, the client never learns of it) and is then
// cut. Several calls arm several drops, one connection each. The returned
// channel is closed when the drop has happened (or the proxy closed).
func (p *Proxy) DropNextReply() <-chan struct{} {
	ch := make(chan struct{})
	p.update(func() {
		if p.closed {
			close(ch)
			return
		}
		p.drops = append(p.drops, ch)
	})
	return ch
}

// CutAll closes every open connection, on both sides, discarding bytes that
// are delayed or held, and every connection accepted before it that is
// still dialling the target (it is closed instead of forwarded). It returns
// how many open connections it cut. New connections are accepted as usual
// unless RefuseNew is on.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	p.cutGen++
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.cut += len(conns)
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	return len(conns)
}

// Heal removes every fault: latency, holds (delivering what was held),
// refusal, and drops that are armed but have not happened (their channels are
// closed). Open connections stay open.
func (p *Proxy) Heal() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	var pending []chan struct{}
	for _, c := range conns {
		c.mu.Lock()
		if c.drop != nil {
			pending = append(pending, c.drop)
			c.drop = nil
		}
		c.mu.Unlock()
	}
	p.update(func() {
		p.latency = [2]time.Duration{}
		p.held = [2]bool{}
		p.holdArm = false
		p.refuse = false
		pending = append(pending, p.drops...)
		p.drops = nil
	})
	for _, ch := range pending {
		close(ch)
	}
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Accepted: p.accepted, Refused: p.refused, Cut: p.cut, Dropped: p.dropped, Open: len(p.conns),
		UpBytes: p.bytes[Upstream].Load(), DownBytes: p.bytes[Downstream].Load(),
	}
}

// update applies f under the lock and wakes every writer waiting on a
// control.
func (p *Proxy) update(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient accept error; try again
		}
		p.mu.Lock()
		refuse, closed, gen := p.refuse, p.closed, p.cutGen
		if refuse {
			p.refused++
		}
		p.mu.Unlock()
		if refuse || closed {
			abort(client)
			continue
		}
		p.wg.Add(1)
		go p.serve(client, gen)
	}
}

// serve dials the target for one accepted client and pumps both ways. gen
// is cutGen when the client was accepted: a CutAll while the target was
// being dialled cuts this connection too.
func (p *Proxy) serve(client net.Conn, gen int) {
	defer p.wg.Done()
	p.mu.Lock()
	dial := p.dial
	p.mu.Unlock()
	server, err := dial(p.target)
	if err != nil {
		abort(client)
		return
	}
	c := &proxyConn{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.cutGen != gen {
		if !p.closed {
			p.cut++
		}
		p.mu.Unlock()
		abort(client)
		_ = server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.accepted++
	p.mu.Unlock()

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); c.pump(Upstream, client, server) }()
	go func() { defer pumps.Done(); c.pump(Downstream, server, client) }()
	pumps.Wait()
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// dialTarget is a Proxy's dial.
func dialTarget(target string) (net.Conn, error) {
	return net.DialTimeout("tcp", target, 5*time.Second)
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// proxyConn is one proxied connection.
type proxyConn struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the connection is cut

	mu   sync.Mutex
	drop chan struct{} // set when this connection's next reply is to be dropped
}

// close cuts both sides at once. The client side is reset rather than shut
// down gracefully, as a broken network would leave it.
func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		abort(c.client)
		_ = c.server.Close()
		c.mu.Lock()
		pending := c.drop // bound to this connection, but no reply came
		c.drop = nil
		c.mu.Unlock()
		if pending == nil {
			return
		}
		// The drop did not happen: hand it to the next connection, or
		// release its waiter when the proxy is closing.
		c.p.mu.Lock()
		closed := c.p.closed
		if !closed {
			c.p.drops = append([]chan struct{}{pending}, c.p.drops...)
		}
		c.p.mu.Unlock()
		if closed {
			close(pending)
		}
	})
}

type chunk struct {
	data []byte
	at   time.Time // when the proxy read it
}

// pump copies src to dst in direction dir: a reader goroutine queues chunks
// with the time they were read, and this goroutine writes each when its
// latency has passed and the direction is not held.
func (c *proxyConn) pump(dir Direction, src, dst net.Conn) {
	queue := make(chan chunk, 64)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				c.p.bytes[dir].Add(int64(n))
				select {
				case queue <- chunk{data: buf[:n], at: time.Now()}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		// Whatever ended this direction ends the connection; let the reader
		// finish.
		c.close()
		for range queue {
		}
	}()
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-queue:
			if !ok {
				return
			}
		case <-c.done:
			return
		}
		if !c.wait(dir, ch.at) {
			return
		}
		if dir == Downstream && c.takeDrop() {
			return // the deferred close cuts the connection
		}
		if dir == Upstream {
			c.armDrop()
			c.p.countRequest()
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}

// wait blocks until a chunk read at `at` may be written in direction dir:
// its latency has passed and dir is not held. It returns false when the
// connection was cut meanwhile.
func (c *proxyConn) wait(dir Direction, at time.Time) bool {
	for {
		c.p.mu.Lock()
		held, lat, changed := c.p.held[dir], c.p.latency[dir], c.p.changed
		c.p.mu.Unlock()
		var t *time.Timer
		var timer <-chan time.Time
		if !held {
			d := time.Until(at.Add(lat))
			if d <= 0 {
				return true
			}
			t = time.NewTimer(d)
			timer = t.C
		}
		select {
		case <-c.done:
			stopTimer(t)
			return false
		case <-changed:
		case <-timer:
		}
		stopTimer(t)
	}
}

// armDrop hands this connection the oldest armed drop, if it has none yet:
// the request bytes about to be forwarded are the ones whose reply is lost.
func (c *proxyConn) armDrop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drop != nil {
		return
	}
	c.p.mu.Lock()
	if len(c.p.drops) > 0 {
		c.drop = c.p.drops[0]
		c.p.drops = c.p.drops[1:]
	}
	c.p.mu.Unlock()
}

// takeDrop reports whether the reply about to be delivered must be dropped,
// and if so counts it and signals the waiter.
func (c *proxyConn) takeDrop() bool {
	c.mu.Lock()
	ch := c.drop
	c.drop = nil
	c.mu.Unlock()
	if ch == nil {
		return false
	}
	c.p.mu.Lock()
	c.p.dropped++
	c.p.cut++
	c.p.mu.Unlock()
	c.close()
	close(ch)
	return true
}

// abort closes conn with a reset (SO_LINGER 0) when it is TCP, so that the
// peer sees a broken connection rather than an orderly end of stream.
func abort(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

var _ io.Closer = (*Proxy)(nil)
