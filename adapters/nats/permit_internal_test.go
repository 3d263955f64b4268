package nats

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// A clock sample bounds the server's clock at any later moment: whenever
// between sending and receiving the server read its clock, the true time
// lies within the bounds, which widen by clockDrift as the sample ages.
func TestClockSampleBounds(t *testing.T) {
	sent := time.Now()
	got := sent.Add(10 * time.Millisecond)
	const server = int64(1_000_000_000_000)
	s := clockSample{server: server, sent: sent, got: got}
	for _, read := range []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond} {
		// The server read its clock (server) at sent+read.
		for _, later := range []time.Duration{10 * time.Millisecond, time.Second, 4 * time.Second} {
			at := sent.Add(later)
			truth := server + int64(later-read)
			b := s.at(at)
			if truth < b.lo || truth > b.hi {
				t.Fatalf("read at +%v, asked at +%v: bounds [%d, %d] miss the server's time %d", read, later, b.lo-server, b.hi-server, truth-server)
			}
		}
	}
	b := s.at(sent.Add(4 * time.Second))
	if w := time.Duration(b.hi - b.lo); w < 10*time.Millisecond || w > 10*time.Millisecond+5*time.Millisecond {
		t.Fatalf("bounds 4 s after a 10 ms sample are %v wide; want 10 ms and 2 × 500 ppm of 4 s", w)
	}
}

// A sample is used for clockMaxAge; a narrower one that agrees is kept over
// a wider new one, and one that disagrees is replaced.
func TestServerClockKeepsTheNarrowerSample(t *testing.T) {
	var c serverClock
	now := time.Now()
	if _, ok := c.fresh(now); ok || c.lower(now) != 0 {
		t.Fatal("an empty clock reports a sample")
	}
	narrow := clockSample{server: 1e18, sent: now, got: now.Add(time.Millisecond)}
	c.put(narrow)
	wide := clockSample{server: 1e18, sent: now, got: now.Add(100 * time.Millisecond)}
	c.put(wide)
	if c.s != narrow {
		t.Fatal("a wider sample that agrees replaced a narrower one")
	}
	off := clockSample{server: 1e18 + int64(time.Hour), sent: now, got: now.Add(100 * time.Millisecond)}
	c.put(off)
	if c.s != off {
		t.Fatal("a sample that disagrees (the leader changed, or its clock stepped) was not taken")
	}
	if _, ok := c.fresh(now.Add(clockMaxAge)); ok {
		t.Fatalf("a sample of age %v is fresh; want at most %v", clockMaxAge, clockMaxAge)
	}
	if c.lower(now.Add(time.Minute)) == 0 {
		t.Fatal("an old sample gives no lower bound")
	}
}

// decidePermit drops a permit only once its expiry is at or below the lower
// bound of the server's clock, and sets a new expiry at the upper bound
// plus the TTL.
func TestDecidePermitExpiry(t *testing.T) {
	const x = int64(1e18)
	st := permitState{shape: driver.Semaphore, limit: 1, holders: []permitHolder{{owner: "h", kind: driver.Semaphore, token: 5, expires: x}}}
	req := driver.Request{Kind: driver.Semaphore, Limit: 1, TTL: time.Second}

	// The expiry may have passed (within the bounds), not certainly.
	_, _, out, err := decidePermit(st, serverTime{lo: x - 1, hi: x + 10}, ask("w", req))
	var held *driver.HeldError
	if out != permitRefused || !errors.As(err, &held) || held.TTL != 1 || held.Permits != 1 {
		t.Fatalf("a permit that may have expired: %v, %v; want refused with the time until it certainly has (1 ns), naming the semaphore's 1 permit", out, err)
	}
	// Certainly passed: dropped, and the new permit expires at hi + TTL.
	next, p, out, err := decidePermit(st, serverTime{lo: x, hi: x + 10}, ask("w", req))
	if err != nil || out != permitGranted || p.Token != 0 || len(next.holders) != 1 || next.holders[0].owner != "w" ||
		next.holders[0].expires != x+10+int64(time.Second) || next.holders[0].token != 0 {
		t.Fatalf("a permit that certainly expired: %v, %+v, %+v, %v; want it dropped and w's permit expiring at hi+TTL, token to mint", out, p, next, err)
	}
	// The holder asking again renews to hi + TTL and keeps its token.
	next, p, out, err = decidePermit(st, serverTime{lo: x - 100, hi: x - 50}, ask("h", req))
	if err != nil || out != permitRenewed || p.Token != 5 || next.holders[0].expires != x-50+int64(time.Second) {
		t.Fatalf("the holder's renewal: %v, %+v, %+v, %v", out, p, next, err)
	}
}

// decidePermit's admission: the line's order, the shape, a place kept once.
func TestDecidePermitRules(t *testing.T) {
	now := serverTime{lo: 100, hi: 110}
	live := int64(1e18)
	rw := permitState{shape: driver.Write, lastWriter: 7,
		holders: []permitHolder{{owner: "r", kind: driver.Read, token: 9, prior: 7, expires: live}},
		line:    []permitPlace{{owner: "w", kind: driver.Write, expires: live}}}
	read := driver.Request{Kind: driver.Read, TTL: time.Second}
	if _, _, out, _ := decidePermit(rw, now, ask("r2", read)); out != permitRefused {
		t.Fatalf("a reader without a place behind a waiting writer: %v; want refused", out)
	}
	read.Place = time.Second
	next, _, out, _ := decidePermit(rw, now, ask("r2", read))
	if out != permitQueued || len(next.line) != 2 || next.line[1].owner != "r2" || next.line[1].expires != 110+int64(time.Second) {
		t.Fatalf("a reader with a place: %v, %+v; want a place at the tail expiring at hi+place", out, next.line)
	}
	again, _, out, _ := decidePermit(next, now, ask("r2", read))
	if out != permitQueued || len(again.line) != 2 {
		t.Fatalf("the reader asking again: %v, %+v; want its one place kept", out, again.line)
	}
	if _, _, _, err := decidePermit(rw, now, ask("x", driver.Request{Kind: driver.Semaphore, Limit: 2, TTL: time.Second})); !errors.Is(err, driver.ErrShapeMismatch) {
		t.Fatalf("a semaphore asked of a read-write lock: %v; want ErrShapeMismatch", err)
	}
	if _, _, _, err := decidePermit(rw, now, ask("r", driver.Request{Kind: driver.Write, TTL: time.Second})); !errors.Is(err, driver.ErrShapeMismatch) {
		t.Fatalf("a reader asking for the write permit: %v; want ErrShapeMismatch", err)
	}
	// The reader leaves: the writer first in line gets in, with the last
	// writer as its PriorWriter; its message makes it the last writer.
	rw.holders = nil
	next, p, out, _ := decidePermit(rw, now, ask("w", driver.Request{Kind: driver.Write, TTL: time.Second}))
	if out != permitGranted || p.PriorWriter != 7 || len(next.line) != 0 {
		t.Fatalf("the writer first in line: %v, %+v, %+v; want granted with prior writer 7 and its place gone", out, p, next)
	}
	got, err := decodePermits(next.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got, err = got.resolve(42); err != nil || got.holders[0].token != 42 || got.lastWriter != 42 || got.holders[0].prior != 7 {
		t.Fatalf("the writer's message read back at revision 42: %+v, %v; want token 42, last writer 42, prior 7", got, err)
	}
	// Idle once everything expired: another shape is taken.
	if _, _, out, err := decidePermit(rw, serverTime{lo: live, hi: live}, ask("s", driver.Request{Kind: driver.Semaphore, Limit: 3, TTL: time.Second})); out != permitGranted || err != nil {
		t.Fatalf("a semaphore of a name whose read-write entries all expired: %v, %v; want granted", out, err)
	}
}

// ask is req made by owner on the permit name "n".
func ask(owner string, req driver.Request) driver.Request {
	req.Name, req.Owner = "n", owner
	return req
}

// A key holding anything but a permit state is refused as malformed.
func TestDecodePermitsRefusesMalformed(t *testing.T) {
	for what, data := range map[string]string{
		"not JSON":             "owner",
		"another format":       `{"v":2}`,
		"a bad shape":          `{"v":1,"shape":2}`,
		"a limit out of range": `{"v":1,"shape":1,"limit":0}`,
		"a bad kind":           `{"v":1,"shape":1,"limit":2,"holders":[{"owner":"a","kind":9,"token":3,"expires":1}]}`,
		"two grants":           `{"v":1,"shape":1,"limit":2,"holders":[{"owner":"a","kind":1,"expires":1},{"owner":"b","kind":1,"expires":1}]}`,
		"permits, no shape":    `{"v":1,"line":[{"owner":"a","kind":1,"expires":1}]}`,
	} {
		if _, err := decodePermits([]byte(data)); !errors.Is(err, ErrMalformedRecord) {
			t.Errorf("%s (%s): %v; want ErrMalformedRecord", what, data, err)
		}
	}
}

// mayAdmit wakes a waiter for a published state that lets it in, that
// lost its place, or of another shape, and not for one that keeps it out.
func TestMayAdmit(t *testing.T) {
	sem := permitState{shape: driver.Semaphore, limit: 2,
		holders: []permitHolder{{owner: "h", kind: driver.Semaphore, token: 1}},
		line:    []permitPlace{{owner: "a", kind: driver.Semaphore}, {owner: "b", kind: driver.Semaphore}}}
	for _, c := range []struct {
		st    permitState
		owner string
		want  bool
	}{
		{sem, "a", true},    // 1 permit, nobody ahead: in
		{sem, "b", false},   // 1 permit and a ahead: the limit
		{sem, "h", false},   // holds one
		{sem, "gone", true}, // no place: queue again
	} {
		if got := mayAdmit(c.st, c.owner, driver.Semaphore, 2); got != c.want {
			t.Errorf("mayAdmit(%s) = %v; want %v", c.owner, got, c.want)
		}
	}
	if !mayAdmit(sem, "a", driver.Semaphore, 3) {
		t.Error("a waiter for another limit is not woken to learn of it")
	}
	rw := permitState{shape: driver.Write, line: []permitPlace{{owner: "r1", kind: driver.Read}, {owner: "r2", kind: driver.Read}, {owner: "w", kind: driver.Write}}}
	if !mayAdmit(rw, "r2", driver.Read, 0) || mayAdmit(rw, "w", driver.Write, 0) {
		t.Error("a free read-write lock: the readers ahead of the writer are let in together, the writer waits for them")
	}
	if !strings.Contains(string(rw.encode()), `"shape":3`) {
		t.Errorf("encode: %s", rw.encode())
	}
}
