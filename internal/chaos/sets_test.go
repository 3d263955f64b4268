package chaos

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// setRun runs cfg in set mode, with short defaults (5 workers, 1 s, TTL
// 30 ms, a memory store), and returns the report and its text.
func setRun(t *testing.T, cfg Config) (*Report, string) {
	t.Helper()
	cfg.Sets = true
	if cfg.Store == nil {
		cfg.Store = memory.NewStore()
	}
	if cfg.Workers == 0 {
		cfg.Workers = 5
	}
	if cfg.Duration == 0 {
		cfg.Duration = time.Second
	}
	if cfg.TTL == 0 {
		cfg.TTL = 30 * time.Millisecond
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	return rep, out.String()
}

// Sets on the in-process backend, which takes a set in one step and queues
// waiters: no violation, and the run did what it is for (pauses, overlaps,
// stale writes refused).
func TestRunSetsOnMemory(t *testing.T) {
	t.Parallel()
	rep, out := setRun(t, Config{Name: "memory", Backend: memory.NewBackend(), Seed: 11})
	if !rep.OK() {
		t.Fatalf("violations on a fenced set run:\n%s", out)
	}
	if rep.Keys != 4 || !rep.Sets || !bytes.Contains([]byte(out), []byte("sets of 2-3 names")) {
		t.Fatalf("not a set run over the default pool of 4 names:\n%s", out)
	}
	if rep.Acquisitions < 20 || rep.Pauses == 0 || rep.StaleRefused == 0 || rep.Overlaps == 0 {
		t.Fatalf("the run exercised too little:\n%s", out)
	}
	if rep.Final != int64(rep.Increments) || rep.Increments <= rep.Acquisitions {
		t.Fatalf("final %d, increments %d for %d sets: each set increments 2 or 3 names", rep.Final, rep.Increments, rep.Acquisitions)
	}
	t.Logf("\n%s", out)
}

// Over a backend without a one-step set acquire the Client takes the names
// one by one in sorted order: still no violation.
func TestRunSetsNameByName(t *testing.T) {
	t.Parallel()
	rep, out := setRun(t, Config{Name: "memory, polled, in order", Backend: nameByName{memory.NewBackend()}, Polling: true, Seed: 12})
	if !rep.OK() || rep.Acquisitions < 20 {
		t.Fatalf("a set run taking names in order:\n%s", out)
	}
}

// The same work without fencing loses increments on the names of
// overlapping sets, and the checker says so.
func TestRunSetsUnfencedFails(t *testing.T) {
	t.Parallel()
	testkit.SomeSeedShows(t, 3, "an unfenced set run must lose increments and fail both checks", func(seed uint64) (bool, string) {
		rep, out := setRun(t, Config{Name: "memory", Backend: nameByName{memory.NewBackend()}, Polling: true, Unfenced: true, Seed: seed})
		return !rep.OK() && rep.Lost > 0 && rep.StaleAccepted > 0 && rep.Register.Result == porcupine.Illegal, out
	})
}

// A set run over a store that ignores tokens fails: the checker catches a
// store bug under sets as it does under single names.
func TestRunSetsCatchesABrokenStore(t *testing.T) {
	t.Parallel()
	testkit.SomeSeedShows(t, 3, "a store that ignores tokens must fail a set run", func(seed uint64) (bool, string) {
		rep, out := setRun(t, Config{Name: "broken store", Backend: memory.NewBackend(), Store: brokenStore{memory.NewStore()}, Seed: seed})
		return !rep.OK() && rep.Lost > 0 && rep.Register.Result == porcupine.Illegal, out
	})
}

// grabbing is a lock with a bug: it hands every set (and every name) to
// whoever asks, each with a fresh, rising token. Fencing keeps the data
// right (each name's newest holder wins), so only the check for two live
// holders can see it.
type grabbing struct {
	driver.Backend // Inspect, Extend: never reached with keep-alive off
	mu             sync.Mutex
	next           map[string]fence.Token
}

func (g *grabbing) Acquire(_ context.Context, req driver.Request) (driver.Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.Names == nil {
		g.next[req.Name]++
		return driver.Grant{Token: g.next[req.Name]}, nil
	}
	tokens := make([]fence.Token, len(req.Names))
	for i, n := range req.Names {
		g.next[n]++
		tokens[i] = g.next[n]
	}
	return driver.Grant{Tokens: tokens}, nil
}

func (g *grabbing) Release(context.Context, driver.Claim) error { return nil }

func TestRunSetsCatchesTwoLiveHolders(t *testing.T) {
	t.Parallel()
	b := &grabbing{Backend: memory.NewBackend(), next: map[string]fence.Token{}}
	rep, out := setRun(t, Config{Name: "grabbing lock", Backend: b, Seed: 15, PauseChance: -1})
	if rep.OK() || rep.DoubleHolders == 0 {
		t.Fatalf("a lock that hands a held name to another owner passed:\n%s", out)
	}
	t.Logf("\n%s", out)
	// Fencing held the data together: only exclusion failed.
	if rep.Lost != 0 || rep.StaleAccepted != 0 || rep.Register.Result != porcupine.Ok {
		t.Fatalf("fenced writes under a grabbing lock lost data:\n%s", out)
	}
}

// deadlocking is a lock with a bug: it takes a set's names one at a time,
// in the order given or the reverse (by the owner), and while one is busy
// it waits, keeping the names it took (taken for a hundred TTLs, as if kept
// alive: a machine at load 30 may not renew a 30 ms lease in time). Two
// callers asking for overlapping sets in opposite orders then wait for each
// other until the run ends.
type deadlocking struct{ driver.Backend }

func (d deadlocking) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	names, owner := req.Names, req.Owner
	if names == nil {
		return d.Backend.Acquire(ctx, req)
	}
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
		if owner[0]%2 == 1 {
			order[i] = len(names) - 1 - i
		}
	}
	tokens := make([]fence.Token, len(names))
	for _, i := range order {
		for {
			g, err := d.Backend.Acquire(ctx, driver.Request{Name: names[i], Owner: owner, TTL: 100 * req.TTL, Kind: driver.Exclusive})
			if err == nil {
				tokens[i] = g.Token
				break
			}
			if !errors.Is(err, lock.ErrHeld) {
				return driver.Grant{}, err
			}
			if !sleep(ctx, time.Millisecond) {
				return driver.Grant{}, ctx.Err()
			}
		}
	}
	return driver.Grant{Tokens: tokens}, nil
}

func TestRunSetsCatchesADeadlock(t *testing.T) {
	t.Parallel()
	rep, out := setRun(t, Config{
		Name: "deadlocking lock", Backend: deadlocking{memory.NewBackend()}, Polling: true, Seed: 16,
		PauseChance: -1, StallLimit: 300 * time.Millisecond,
	})
	if rep.OK() || rep.FinalStall <= 300*time.Millisecond {
		t.Fatalf("a lock that deadlocks passed:\n%s", out)
	}
	t.Logf("\n%s", out)
	if !bytes.Contains([]byte(out), []byte("no progress")) {
		t.Fatalf("report does not name the stall:\n%s", out)
	}
}

// liveHolders on hand-made histories of one lock (TTL 100, ambiguity 50):
// it flags only overlaps that are certain.
func TestLiveHolders(t *testing.T) {
	acq := func(owner string, call, ret int64) Op {
		return Op{Kind: Acquire, Owner: owner, Token: call, Outcome: OK, Call: call, Return: ret}
	}
	rel := func(owner string, call, ret int64) Op {
		return Op{Kind: Release, Owner: owner, Outcome: OK, Call: call, Return: ret}
	}
	cases := []struct {
		name string
		ops  []Op
		want int
	}{
		{"one after the other's expiry", []Op{acq("a", 0, 10), acq("b", 100, 110)}, 0},
		{"inside the other's TTL", []Op{acq("a", 0, 10), acq("b", 50, 60)}, 1},
		{"after the other's release", []Op{acq("a", 0, 10), rel("a", 30, 35), acq("b", 50, 60)}, 0},
		{"before the other's release was called", []Op{acq("a", 0, 10), acq("b", 20, 25), rel("a", 30, 35)}, 1},
		{"the same owner again (a retried attempt)", []Op{acq("a", 0, 10), acq("a", 20, 30)}, 0},
		// a's reply came after its TTL: nothing says when it held the lock.
		{"a reply past the TTL", []Op{acq("a", 0, 99), acq("b", 50, 60)}, 0},
		// An earlier release by a may land late, right after a's grant.
		{"an earlier release that may land late", []Op{rel("a", 0, 5), acq("a", 20, 30), acq("b", 40, 50)}, 0},
		{"an earlier release that landed long before", []Op{rel("a", 0, 5), acq("a", 100, 110), acq("b", 140, 150)}, 1},
		// Overlapping calls: b's grant may have come before a's.
		{"calls that overlap, held together after both returned", []Op{acq("a", 0, 30), acq("b", 10, 20)}, 1},
	}
	for _, c := range cases {
		if n, ex := liveHolders(c.ops, 100, 50); n != c.want || (n > 0) != (ex != "") {
			t.Errorf("%s: %d (%q), want %d", c.name, n, ex, c.want)
		}
	}
}

func TestProgress(t *testing.T) {
	rep := &Report{Sets: true, Workers: 3, Acquisitions: 4}
	rep.progress([][]int64{{10, 20, 400}, {30}, nil}, 1000, 500)
	if rep.FewestPerWorker != 0 || rep.Starved != 1 || rep.LongestStall != 600 || rep.StallAt != 400 || rep.FinalStall != 600 {
		t.Fatalf("fewest %d, starved %d, stall %v from %v, final %v", rep.FewestPerWorker, rep.Starved, rep.LongestStall, rep.StallAt, rep.FinalStall)
	}
	if v := rep.progressViolations(); len(v) != 1 {
		t.Fatalf("violations %q, want the final stall alone (a starved worker is a figure)", v)
	}
	// A long stall that ended (progress resumed) is a figure; so is the
	// time before the first acquisition (connecting).
	resumed := &Report{Sets: true, Workers: 1, Acquisitions: 3}
	resumed.progress([][]int64{{300, 900, 950}}, 1000, 500)
	if resumed.LongestStall != 600 || resumed.FinalStall != 50 || len(resumed.progressViolations()) != 0 {
		t.Fatalf("stall %v, final %v, violations %q", resumed.LongestStall, resumed.FinalStall, resumed.progressViolations())
	}
	none := &Report{Sets: true, Workers: 2}
	none.progress([][]int64{nil, nil}, 1000, 500)
	if v := none.progressViolations(); len(v) != 1 || none.Starved != 2 {
		t.Fatalf("a run without any set: violations %q, starved %d", v, none.Starved)
	}
	rep.Sets = false
	if v := rep.progressViolations(); len(v) != 0 {
		t.Fatalf("a one-name run reports progress as figures only, not %q", v)
	}
}

// Transfers under sets: no update lost on any counter, and the sum of the
// counters is exactly what the torn transfers (one half landed) added up
// to. The pauses tear some: per-name fencing keeps each counter right, not
// the pair.
func TestRunTransfersOnMemory(t *testing.T) {
	t.Parallel()
	rep, out := setRun(t, Config{Name: "memory", Backend: memory.NewBackend(), Transfer: true, Seed: 17, PauseChance: 0.3})
	t.Logf("\n%s", out)
	if !rep.OK() || !rep.Transfer || !rep.Sets || rep.Keys != 4 || rep.Acquisitions < 10 || rep.StaleRefused == 0 {
		t.Fatalf("a fenced transfer run:\n%s", out)
	}
	if rep.Final != rep.TornNet {
		t.Fatalf("sum %d, net of torn transfers %d", rep.Final, rep.TornNet)
	}
}

func TestRunTransfersUnfencedFails(t *testing.T) {
	t.Parallel()
	testkit.SomeSeedShows(t, 3, "an unfenced transfer run must lose updates and break the sum", func(seed uint64) (bool, string) {
		rep, out := setRun(t, Config{Name: "memory", Backend: nameByName{memory.NewBackend()}, Polling: true, Transfer: true, Unfenced: true, Seed: seed})
		return !rep.OK() && rep.Lost > 0 && rep.Final != rep.TornNet, out
	})
}

// chains on hand-made histories of one key.
func TestChains(t *testing.T) {
	put := func(id, prev, delta, tr int64) Op {
		return Op{Kind: Put, ID: id, Prev: prev, Delta: delta, Transfer: tr, Outcome: OK}
	}
	landed := func(ids ...int64) map[int64]bool {
		m := map[int64]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	get := func(id int64) []Op { return []Op{{Kind: Get, ID: id}} }
	// 1 <- 2 <- 3: one chain, nothing lost.
	hist := []Op{put(1, 0, 5, 0), put(2, 1, -2, 0), put(3, 2, 1, 0)}
	if lost, extra, _, _ := chains(hist, get(3), landed(1, 2, 3)); lost != 0 || extra != 0 {
		t.Fatalf("a clean chain: lost %d, extra %d", lost, extra)
	}
	// 2 and 3 both read 1: one of them was overwritten.
	hist = []Op{put(1, 0, 5, 0), put(2, 1, -2, 0), put(3, 1, 1, 0)}
	if lost, extra, _, _ := chains(hist, get(3), landed(1, 2, 3)); lost != 1 || extra != 0 {
		t.Fatalf("a forked chain: lost %d, extra %d", lost, extra)
	}
	// The final read names a write that never landed.
	if _, extra, _, _ := chains(hist, get(9), landed(1, 2, 3)); extra != 1 {
		t.Fatalf("an unexplained state: extra %d", extra)
	}
	// Transfer 7: only its debit landed (its credit is on another key,
	// refused); the net of torn transfers is the debit.
	hist = []Op{put(1, 0, -3, 7), {Kind: Put, Key: 1, ID: 2, Delta: 3, Transfer: 7, Outcome: Stale}}
	if _, _, torn, net := chains(hist, get(1), landed(1)); torn != 1 || net != -3 {
		t.Fatalf("torn %d, net %d", torn, net)
	}
}
