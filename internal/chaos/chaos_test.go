package chaos

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/models"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// seqHistory builds a sequential history of n fenced read-modify-writes on
// one key by successive holders (tokens 1..n), each op 10 units long.
func seqHistory(n int) []Op {
	var ops []Op
	t := int64(0)
	op := func(o Op) {
		o.Call, o.Return = t, t+10
		t += 20
		ops = append(ops, o)
	}
	for i := int64(1); i <= int64(n); i++ {
		op(Op{Kind: Advance, Token: i, Outcome: OK})
		op(Op{Kind: Get, Value: i - 1, ID: i - 1, Fence: i, FenceOK: true, Outcome: OK})
		op(Op{Kind: Put, Token: i, Value: i, ID: i, Outcome: OK})
	}
	return ops
}

func TestRegisterModelAcceptsAFencedHistory(t *testing.T) {
	v := checkRegister([][]Op{seqHistory(1000)}, 10*time.Second)
	if v.Result != porcupine.Ok {
		t.Fatalf("verdict %v; failure:\n%s", v, v.Failure)
	}
	if v.Segments < 2 {
		t.Fatalf("a history of %d ops was checked in %d segment(s); it must be cut", v.Ops, v.Segments)
	}
}

func TestRegisterModelRefusesAStaleWriteThatLanded(t *testing.T) {
	for _, at := range []int{5, 2500} { // in the first segment and in a later one
		ops := seqHistory(1000)
		// Holder 2 wrote with token 2 while the fence was already higher,
		// and the store said ok: the write fencing exists to refuse.
		ops[at].Kind, ops[at].Token, ops[at].Value, ops[at].Outcome = Put, 1, 0, OK
		v := checkRegister([][]Op{ops}, 10*time.Second)
		if v.Result != porcupine.Illegal {
			t.Fatalf("stale write at op %d: verdict %v, want not linearizable", at, v)
		}
		if !strings.Contains(v.Failure, "> ") {
			t.Errorf("failure does not point at an operation:\n%s", v.Failure)
		}
	}
}

func TestRegisterOpsMapOntoTheSharedModel(t *testing.T) {
	m := models.Register(models.RegisterState{Write: 5, Fence: 7})
	cases := []struct {
		name string
		op   Op
		ok   bool
	}{
		{"put at the fence is accepted", Op{Kind: Put, Token: 7, ID: 6, Outcome: OK}, true},
		{"put below the fence accepted is illegal", Op{Kind: Put, Token: 6, ID: 6, Outcome: OK}, false},
		{"put below the fence refused", Op{Kind: Put, Token: 6, ID: 6, Outcome: Stale}, true},
		{"put at the fence refused is illegal", Op{Kind: Put, Token: 7, ID: 6, Outcome: Stale}, false},
		{"unknown put, stale", Op{Kind: Put, Token: 1, ID: 6, Outcome: Unknown}, true},
		{"advance below the fence accepted is illegal", Op{Kind: Advance, Token: 3, Outcome: OK}, false},
		{"get of the write held", Op{Kind: Get, Value: 5, ID: 5, Fence: 7, FenceOK: true, Outcome: OK}, true},
		// The same counter value written by another write is another write.
		{"get of another write with the same value", Op{Kind: Get, Value: 5, ID: 4, Fence: 7, FenceOK: true, Outcome: OK}, false},
		{"get of another fence", Op{Kind: Get, Value: 5, ID: 5, Fence: 6, FenceOK: true, Outcome: OK}, false},
		{"get that found nothing", Op{Kind: Get, Fence: 7, FenceOK: true, Outcome: OK}, false},
		{"get, fence not checked", Op{Kind: Get, Value: 5, ID: 5, Fence: 1, Outcome: OK}, true},
	}
	for _, c := range cases {
		o := registerOp(c.op)
		if ok, _ := m.Step(m.Init(), o.Input, o.Output); ok != c.ok {
			t.Errorf("%s: step %v, want %v", c.name, ok, c.ok)
		}
	}
}

func TestTokenChecks(t *testing.T) {
	acq := func(token, call, ret int64) Op {
		return Op{Kind: Acquire, Token: token, Owner: fmt.Sprint("owner-", token, "-", call), Outcome: OK, Call: call, Return: ret}
	}
	good := []Op{acq(1, 0, 10), acq(3, 20, 30), acq(2, 25, 40) /* concurrent with 3: either order */, acq(4, 50, 60)}
	// 2 and 3 overlap, so 2 may have been issued first... but 3 returned
	// at 30 < 50, fine; and 2 was called at 25, before 3 returned.
	if v := checkTokens([][]Op{good}, time.Second); v.Result != porcupine.Ok {
		t.Fatalf("monotonic tokens: %v", v)
	}
	if n, _ := tokenRegressions(good); n != 0 {
		t.Fatalf("monotonic tokens: %d regressions", n)
	}
	// The same owner's retried attempt gets its token back: legal.
	retried := append(slices.Clone(good), Op{Kind: Acquire, Token: 4, Owner: good[3].Owner, Outcome: OK, Call: 70, Return: 80})
	if v := checkTokens([][]Op{retried}, time.Second); v.Result != porcupine.Ok {
		t.Fatalf("a retried attempt's own token: %v", v)
	}
	if n, _ := tokenRegressions(retried); n != 0 {
		t.Fatalf("a retried attempt's own token: %d regressions", n)
	}
	bad := append(good, acq(4, 70, 80)) // the same token twice, in sequence, for another owner
	if v := checkTokens([][]Op{bad}, time.Second); v.Result != porcupine.Illegal {
		t.Fatalf("a repeated token: %v, want not linearizable", v)
	}
	if n, _ := tokenRegressions(bad); n != 1 {
		t.Fatalf("a repeated token: %d regressions, want 1", n)
	}
}

func TestStaleAcceptedCount(t *testing.T) {
	w := func(kind Kind, token int64, out Outcome, call, ret int64) Op {
		return Op{Kind: kind, Token: token, Outcome: out, Call: call, Return: ret}
	}
	ops := []Op{
		w(Put, 2, OK, 0, 10),
		w(Advance, 5, OK, 20, 30),
		w(Put, 3, Stale, 40, 50), // refused: fine
		w(Put, 4, OK, 25, 45),    // concurrent with the advance: may precede it
		w(Put, 3, OK, 60, 70),    // accepted after token 5 returned: stale
		w(Advance, 1, OK, 80, 90),
	}
	if n, ex := staleAccepted(ops); n != 2 || ex == "" {
		t.Fatalf("stale accepted %d (%q), want 2", n, ex)
	}
}

func TestValueEncoding(t *testing.T) {
	n, id, err := decodeValue(encodeValue(41, 7))
	if err != nil || n != 41 || id != 7 {
		t.Fatalf("decode: %d, %d, %v", n, id, err)
	}
	for _, bad := range []string{"", "41", "x:1", "1:y"} {
		if _, _, err := decodeValue([]byte(bad)); err == nil {
			t.Errorf("decode %q: no error", bad)
		}
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Fatal("Run without a backend: no error")
	}
	_, err := Run(context.Background(), Config{Backend: memory.NewBackend(), Store: memory.NewStore(), TTL: time.Millisecond})
	if err == nil {
		t.Fatal("Run with a 1ms TTL: no error")
	}
}

// The runner end to end on the in-process backend; internal/faulttest runs
// it on every backend.
func TestRunOnMemory(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{
		Name: "memory", Backend: memory.NewBackend(), Store: memory.NewStore(),
		Workers: 5, Keys: 2, Duration: time.Second, TTL: 30 * time.Millisecond, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !rep.OK() {
		t.Fatalf("violations on a fenced run:\n%s", out.String())
	}
	if rep.Acquisitions == 0 || rep.Pauses == 0 || rep.StaleRefused == 0 || rep.Increments == 0 {
		t.Fatalf("the run exercised too little:\n%s", out.String())
	}
	if rep.Final != int64(rep.Increments) {
		t.Fatalf("final %d, increments %d", rep.Final, rep.Increments)
	}
	if !strings.Contains(out.String(), "no violation") {
		t.Fatalf("report:\n%s", out.String())
	}
}

func TestRunUnfencedFails(t *testing.T) {
	t.Parallel()
	testkit.SomeSeedShows(t, 3, "an unfenced run must lose increments and fail both checks", func(seed uint64) (bool, string) {
		rep, err := Run(context.Background(), Config{
			Name: "memory", Backend: memory.NewBackend(), Store: memory.NewStore(),
			Workers: 5, Keys: 2, Duration: time.Second, TTL: 30 * time.Millisecond, Seed: seed, Unfenced: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.StaleRefused != 0 {
			t.Fatalf("an unfenced store refused %d writes", rep.StaleRefused)
		}
		return !rep.OK() && rep.Lost > 0 && rep.StaleAccepted > 0 && rep.Register.Result == porcupine.Illegal, printed(rep)
	})
}

// flakyStore fails every third write after applying it, and every fifth
// before: outcomes the workers cannot know, which the checker must accept
// as either.
type flakyStore struct {
	*memory.Store
	mu chan struct{}
	n  int
}

func (s *flakyStore) fault() (after, before bool) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	s.n++
	return s.n%3 == 0, s.n%5 == 0
}

func (s *flakyStore) Put(ctx context.Context, key string, token fence.Token, v []byte) error {
	after, before := s.fault()
	if before {
		return context.DeadlineExceeded
	}
	if err := s.Store.Put(ctx, key, token, v); err != nil || !after {
		return err
	}
	return context.DeadlineExceeded
}

func (s *flakyStore) Advance(ctx context.Context, key string, token fence.Token) error {
	after, before := s.fault()
	if before {
		return context.DeadlineExceeded
	}
	if err := s.Store.Advance(ctx, key, token); err != nil || !after {
		return err
	}
	return context.DeadlineExceeded
}

func TestRunWithUnknownOutcomes(t *testing.T) {
	t.Parallel()
	store := &flakyStore{Store: memory.NewStore(), mu: make(chan struct{}, 1)}
	rep, err := Run(context.Background(), Config{
		Name: "flaky", Backend: memory.NewBackend(), Store: store,
		Workers: 4, Keys: 2, Duration: time.Second, TTL: 30 * time.Millisecond, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !rep.OK() {
		t.Fatalf("unknown outcomes must not be violations:\n%s", out.String())
	}
	if rep.Writes <= rep.Increments || rep.UnknownWrites == 0 {
		t.Fatalf("no write was retried:\n%s", out.String())
	}
}

// fakeNetwork counts the faults the runner asks for.
type fakeNetwork struct{ ch chan string }

func (f *fakeNetwork) Delay(d time.Duration) {
	if d > 0 {
		f.ch <- "delay"
	}
}
func (f *fakeNetwork) Cut()       { f.ch <- "cut" }
func (f *fakeNetwork) DropReply() { f.ch <- "drop" }
func (f *fakeNetwork) Heal()      { f.ch <- "heal" }

func TestRunInjectsNetworkFaults(t *testing.T) {
	t.Parallel()
	net := &fakeNetwork{ch: make(chan string, 1000)}
	rep, err := Run(context.Background(), Config{
		Name: "memory", Backend: memory.NewBackend(), Store: memory.NewStore(),
		Workers: 2, Keys: 1, Duration: 500 * time.Millisecond, TTL: 20 * time.Millisecond, Seed: 4,
		Network: net, FaultEvery: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	close(net.ch)
	got := map[string]int{}
	var last string
	for s := range net.ch {
		got[s]++
		last = s
	}
	if got["delay"] != rep.Delays || got["cut"] != rep.Cuts || got["drop"] != rep.Drops {
		t.Fatalf("faults seen %v, reported %d delays, %d cuts, %d drops", got, rep.Delays, rep.Cuts, rep.Drops)
	}
	if rep.Delays+rep.Cuts+rep.Drops == 0 || last != "heal" {
		t.Fatalf("faults %v, last call %q: want some, then a heal", got, last)
	}
}

// brokenStore is an adapter with a bug: it never refuses a token.
type brokenStore struct{ *memory.Store }

func (s brokenStore) Put(ctx context.Context, key string, _ fence.Token, v []byte) error {
	return s.Store.Put(ctx, key, 1, v)
}
func (brokenStore) Advance(context.Context, string, fence.Token) error { return nil }

// brokenBackend is a lock backend with a bug: its tokens wrap around.
type brokenBackend struct{ *memory.Backend }

func (b brokenBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	g.Token = g.Token%4 + 1
	return g, err
}

// A fenced run over a broken store or a broken backend fails the check: it
// catches adapters, not only applications that forget to fence.
func TestRunCatchesBrokenAdapters(t *testing.T) {
	t.Parallel()
	cfg := Config{Workers: 5, Keys: 2, Duration: time.Second, TTL: 30 * time.Millisecond}
	run := func(c Config) *Report {
		rep, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	testkit.SomeSeedShows(t, 3, "a store that ignores tokens must fail the run", func(seed uint64) (bool, string) {
		c := cfg
		c.Name, c.Backend, c.Store, c.Seed = "broken store", memory.NewBackend(), brokenStore{memory.NewStore()}, seed
		rep := run(c)
		return !rep.OK() && rep.Register.Result == porcupine.Illegal && rep.Lost > 0, printed(rep)
	})

	testkit.SomeSeedShows(t, 3, "a backend whose tokens wrap around must fail the run", func(seed uint64) (bool, string) {
		c := cfg
		c.Name, c.Backend, c.Store, c.Polling, c.Seed = "broken backend", brokenBackend{memory.NewBackend()}, memory.NewStore(), true, seed
		rep := run(c)
		return !rep.OK() && rep.Regressions > 0 && rep.Tokens.Result == porcupine.Illegal, printed(rep)
	})
}

// printed is what rep.Print writes.
func printed(rep *Report) string {
	var out bytes.Buffer
	rep.Print(&out)
	return out.String()
}

// The history of a write resent by the client library: the first send
// landed, a newer holder wrote, and the resend was refused, so the caller
// was told "stale" (nothing changed) about a write that had landed. The
// checker must flag it.
func TestCheckCatchesAStaleReportForAWriteThatLanded(t *testing.T) {
	ops := []Op{
		{Kind: Acquire, Worker: 0, Token: 1, Outcome: OK, Call: 0, Return: 10},
		{Kind: Advance, Worker: 0, Token: 1, Outcome: OK, Call: 20, Return: 30},
		{Kind: Get, Worker: 0, FenceOK: true, Fence: 1, Outcome: OK, Call: 40, Return: 50},
		// Sent at 60 and applied; the reply is lost, the library resends
		// after holder 2 advanced, and the resend is refused.
		{Kind: Put, Worker: 0, Token: 1, Value: 1, ID: 1, Outcome: Stale, Call: 60, Return: 400},
		{Kind: Acquire, Worker: 1, Token: 2, Outcome: OK, Call: 100, Return: 110},
		{Kind: Advance, Worker: 1, Token: 2, Outcome: OK, Call: 120, Return: 130},
		{Kind: Get, Worker: 1, Value: 1, ID: 1, FenceOK: true, Fence: 2, Outcome: OK, Call: 140, Return: 150},
		{Kind: Put, Worker: 1, Token: 2, Value: 2, ID: 2, Outcome: OK, Call: 160, Return: 170},
	}
	final := []Op{{Kind: Get, Worker: 2, Value: 2, ID: 2, FenceOK: true, Fence: 2, Outcome: OK, Call: 500, Return: 510}}
	r := &runner{cfg: Config{Keys: 1, Workers: 2, CheckTimeout: 10 * time.Second}}
	rep := r.check(append(ops, final...), final)
	if rep.OK() || rep.Extra != 1 || rep.Register.Result != porcupine.Illegal {
		var out bytes.Buffer
		rep.Print(&out)
		t.Fatalf("a stale report for a write that landed passed:\n%s", out.String())
	}
	// The same history told truthfully (the write's outcome unknown) passes.
	ops[3].Outcome = Unknown
	rep = r.check(append(ops, final...), final)
	if !rep.OK() || rep.Increments != 2 {
		var out bytes.Buffer
		rep.Print(&out)
		t.Fatalf("the truthful history failed:\n%s", out.String())
	}
}

// waiterBackend is a backend with a bug: it mints an owner's token at its
// first attempt, before it checks whether the lock is held, and hands the
// waiter that token when it finally gets the lock. Every token is minted
// once, so no two acquisitions share one; but a waiter's token is below the
// tokens of everyone who got the lock while it waited.
type waiterBackend struct {
	*memory.Backend
	mu       sync.Mutex
	next     int64
	reserved map[string]fence.Token
}

func (b *waiterBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	b.mu.Lock()
	tok, ok := b.reserved[req.Owner]
	if !ok {
		b.next++
		tok = fence.Token(b.next)
		b.reserved[req.Owner] = tok
	}
	b.mu.Unlock()
	if _, err := b.Backend.Acquire(ctx, req); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: tok}, nil
}

// Each waiter's token is below one returned while it waited, and each is
// unique: only the window of the attempt that returned the token shows it.
// Timing the whole retry loop instead let this backend pass.
func TestRunCatchesATokenBelowOneReturnedWhileWaiting(t *testing.T) {
	t.Parallel()
	rep, err := Run(context.Background(), Config{
		Name: "waiter tokens", Backend: &waiterBackend{Backend: memory.NewBackend(), reserved: map[string]fence.Token{}}, Polling: true,
		Store: memory.NewStore(), Workers: 5, Keys: 1, Duration: time.Second, TTL: 30 * time.Millisecond, Seed: 6,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if rep.OK() || rep.Regressions == 0 || rep.Tokens.Result != porcupine.Illegal {
		t.Fatalf("a backend that hands waiters older tokens passed:\n%s", out.String())
	}
}

// One increment lost and one counter step without an increment must both be
// reported, not cancel out.
func TestCheckCountsLostAndExtraApart(t *testing.T) {
	put := func(worker int, token, value, id, call int64) Op {
		return Op{Kind: Put, Worker: worker, Token: token, Value: value, ID: id, Outcome: OK, Call: call, Return: call + 5}
	}
	ops := []Op{
		put(0, 1, 1, 1, 0),
		put(1, 2, 2, 2, 10),
		put(2, 3, 2, 3, 20), // read 1 again and wrote 2: one increment lost
		put(3, 4, 4, 4, 30), // wrote 4 after 2: step 3 came from nowhere
	}
	final := []Op{{Kind: Get, Worker: 4, Value: 4, ID: 4, Outcome: OK, Call: 100, Return: 110}}
	r := &runner{cfg: Config{Keys: 1, Workers: 4, CheckTimeout: 10 * time.Second}}
	rep := r.check(append(ops, final...), final)
	if rep.Lost != 1 || rep.Extra != 1 || rep.OK() {
		var out bytes.Buffer
		rep.Print(&out)
		t.Fatalf("lost %d, extra %d; want 1 and 1:\n%s", rep.Lost, rep.Extra, out.String())
	}
	if rep.Increments != int(rep.Final) {
		t.Fatalf("the history was built with as many increments (%d) as the final counter (%d)", rep.Increments, rep.Final)
	}
}
