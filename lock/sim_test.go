package lock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// The deterministic simulation of the lock client (issue 27). Each schedule
// runs in its own testing/synctest bubble: a few client processes acquire,
// extend, release, run Do and Lead against simWorld's server and store,
// whose network delays, loses, duplicates and reorders requests and replies
// and whose processes pause, every choice drawn from the schedule's seed.
// The invariants are checked while the schedule runs and at its end; a
// schedule that breaks one reports its seed, and
//
//	go test ./lock -run 'TestSimulation$' -seed N
//
// replays it. docs/reliability.md describes the simulation.

var (
	simSeed      = flag.Uint64("seed", 0, "TestSimulation: run only the schedule with this seed (and print what it did)")
	simTrace     = flag.Bool("sim.trace", false, "TestSimulation: with -seed, print every request and event of the schedule")
	simVariant   = flag.String("sim.variant", "", "TestSimulation: switch on this deliberately broken client (see simVariants; needs -tags fencekit_broken)")
	simFirst     = flag.Uint64("sim.first", 1, "TestSimulation: the seed of the first schedule")
	simSchedules = flag.Int("sim.schedules", 0, "TestSimulation: how many schedules to run (0: the default, fewer under -race)")
)

// Schedules TestSimulation runs by default: enough to find both Extend bugs
// of issue 21 point 5 on every run, few enough that the package's tests stay
// quick under -race. CI runs 100,000 more without -race (.ci/run).
const (
	simDefaultSchedules     = 4000
	simDefaultSchedulesRace = 1500
)

// simKnownBugs are the kinds of violation (see simViolation) that the code
// is known to have: TestSimulation counts them and names their seeds instead
// of failing, and TestSimulationFindsKnownBugs shows that the harness finds
// each. The harness landed with the three bugs of issue 21 points 5 and 6
// in it; their fixes emptied it.
var simKnownBugs = map[string]bool{}

// The seams of simhooks.go reach a Client's simulated process through its
// backend. (A call with CallOptions runs on a copy of the Client, so the
// Client itself is no key.)
func init() {
	jitterHook = func(c *Client, n int64) int64 {
		if b, ok := c.driver.(simBackend); ok {
			return int64(b.p.between(0, time.Duration(n-1)))
		}
		return rand.Int64N(n)
	}
	timerHook = func(l *Lease) {
		if b, ok := l.client.driver.(simBackend); ok {
			b.p.gate(time.Nanosecond)
			// Also one nanosecond after whatever else falls on the
			// deadline (the keep-alive's renewal context ends there
			// too), so that the order of the two is not the
			// scheduler's. Err sees the deadline itself meanwhile.
			time.Sleep(time.Nanosecond)
		}
	}
}

func TestSimulation(t *testing.T) {
	if *simVariant != "" {
		defer setSimVariant(t, *simVariant)()
	}
	if *simSeed != 0 {
		w, panicked := runScheduleInBubble(t, *simSeed)
		t.Logf("seed %d: %+v, profile %+v", *simSeed, w.stats, w.prof)
		if *simTrace {
			t.Log("trace:\n" + strings.Join(w.trace, "\n"))
		}
		for _, v := range w.violations {
			if simKnownBugs[v.kind] {
				t.Logf("known bug: %s", v.text)
			}
		}
		if msg := w.report(panicked); msg != "" {
			t.Fatal(msg)
		}
		return
	}
	n := *simSchedules
	if n == 0 {
		n = simDefaultSchedules
		if raceEnabled {
			n = simDefaultSchedulesRace
		}
	}
	res := simSweep(t, *simFirst, n)
	for _, f := range res.failed {
		t.Error(f)
	}
	for kind, seeds := range res.known {
		t.Logf("known bug %s: %d schedules, first seeds %v", kind, res.knownCount[kind], seeds)
	}
}

// simResult is what a sweep found.
type simResult struct {
	failed     []string            // reports of schedules that broke an invariant
	known      map[string][]uint64 // the first seeds that showed each known bug
	knownCount map[string]int
	stats      simStats
}

// simSweep runs the schedules with seeds first to first+n-1 on every core,
// and returns the reports of the first few that failed.
func simSweep(t *testing.T, first uint64, n int) simResult {
	var (
		mu  sync.Mutex
		res = simResult{known: map[string][]uint64{}, knownCount: map[string]int{}}
	)
	workers := runtime.GOMAXPROCS(0)
	start := time.Now()
	t.Run("schedules", func(t *testing.T) {
		for k := range workers {
			t.Run(strconv.Itoa(k), func(t *testing.T) {
				t.Parallel()
				for seed := first + uint64(k); seed < first+uint64(n); seed += uint64(workers) {
					began := time.Now()
					w, panicked := runScheduleInBubble(t, seed)
					if d := time.Since(began); d > 5*time.Second {
						t.Logf("seed %d took %v: %+v", seed, d, w.stats)
					}
					mu.Lock()
					res.stats.add(w.stats)
					if msg := w.report(panicked); msg != "" && len(res.failed) < 5 {
						res.failed = append(res.failed, msg)
					}
					for _, kind := range w.knownKinds() {
						res.knownCount[kind]++
						if len(res.known[kind]) < 5 {
							res.known[kind] = append(res.known[kind], seed)
						}
					}
					stop := len(res.failed) >= 5
					mu.Unlock()
					if stop {
						return
					}
				}
			})
		}
	})
	t.Logf("%d schedules in %v: %+v", n, time.Since(start).Round(time.Millisecond), res.stats)
	for kind := range res.known {
		slices.Sort(res.known[kind])
	}
	return res
}

// knownKinds returns the known bugs the schedule showed, each once.
func (w *simWorld) knownKinds() []string {
	var kinds []string
	for _, v := range w.violations {
		if simKnownBugs[v.kind] && !slices.Contains(kinds, v.kind) {
			kinds = append(kinds, v.kind)
		}
	}
	return kinds
}

func (s *simStats) add(o simStats) {
	s.requests += o.requests
	s.faults += o.faults
	s.acquired += o.acquired
	s.extended += o.extended
	s.released += o.released
	s.lost += o.lost
	s.pauses += o.pauses
	s.lateReplies += o.lateReplies
}

// runScheduleInBubble runs one schedule in a synctest bubble. A bubble that
// ends with goroutines blocked for good makes synctest panic: that is a
// leaked goroutine, reported with the seed like any other violation.
func runScheduleInBubble(t *testing.T, seed uint64) (w *simWorld, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
			if w == nil {
				w = &simWorld{seed: seed}
			}
		}
	}()
	synctest.Test(t, func(t *testing.T) { w = runSchedule(seed) })
	return w, nil
}

// report is the failure message of a schedule, or "" if it kept every
// invariant.
func (w *simWorld) report(panicked any) string {
	unknown := slices.ContainsFunc(w.violations, func(v simViolation) bool { return !simKnownBugs[v.kind] })
	if panicked == nil && !unknown {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "simulation seed %d broke an invariant (replay: go test%s%s ./lock -run 'TestSimulation$' -seed %d%s):", w.seed, simRaceFlag(), simTagsFlag(), w.seed, simVariantFlag())
	for _, v := range w.violations {
		fmt.Fprintf(&b, "\n\t%s", v.text)
	}
	if panicked != nil {
		fmt.Fprintf(&b, "\n\tthe bubble did not end cleanly (goroutines left blocked?): %v", panicked)
	}
	return b.String()
}

// simRaceFlag is " -race" in a -race build: a replay is exact in the same
// kind of build. Goroutines that run at one simulated instant run in the
// scheduler's order; the harness keeps its own choices out of that order,
// but the client's own goroutines (the keep-alive taking the renewal slot
// at the instant its holder calls Release, say) may go either way, and the
// race detector's scheduling differs from a plain build's.
func simRaceFlag() string {
	if raceEnabled {
		return " -race"
	}
	return ""
}

// simTagsFlag is " -tags fencekit_broken" in the build with the broken
// variants (see brokenVariants), which a replay of one needs.
func simTagsFlag() string {
	if brokenBuild {
		return " -tags fencekit_broken"
	}
	return ""
}

// simVariantFlag is the -sim.variant of a replay of TestSimulation run with
// one, so that the printed command replays the same client.
func simVariantFlag() string {
	if *simVariant != "" {
		return " -sim.variant=" + *simVariant
	}
	return ""
}

// runSchedule plays the schedule of seed; it runs inside a bubble.
func runSchedule(seed uint64) *simWorld {
	w := newSimWorld(seed)
	names := []string{"job"}
	nprocs := 2
	w.mu.Lock()
	if w.rng.IntN(4) == 0 {
		names = append(names, "job2")
	}
	nprocs += w.rng.IntN(2)
	w.mu.Unlock()
	for i := range nprocs {
		p := &simProc{w: w, id: i, rng: rand.New(rand.NewPCG(seed, uint64(i)+1))}
		p.rec = &simRecorder{w: w, proc: i, events: map[string][]eventKind{}, in: map[string]bool{}}
		opts := &Options{
			Observer:   everyEvent(p.rec.observe),
			MinBackoff: p.between(time.Millisecond, 10*time.Millisecond),
			MaxBackoff: p.between(20*time.Millisecond, 100*time.Millisecond),
			Queue:      QueueOptions{Polling: true}, // the simulated server keeps no line (simBackend)
		}
		p.client = New(simBackend{p}, opts)
		// Pauses that may catch the process in the middle of a call: its
		// reply then arrives when it runs again, before its deadline
		// timer does.
		for n := p.intN(3); n > 0; n-- {
			from := w.start.Add(p.between(0, 400*time.Millisecond))
			p.pauses = append(p.pauses, [2]time.Time{from, from.Add(p.between(10*time.Millisecond, 200*time.Millisecond))})
		}
		w.procs = append(w.procs, p)
	}
	go w.monitor(names)
	var wg sync.WaitGroup
	for _, p := range w.procs {
		wg.Go(func() { p.run(names) })
	}
	wg.Wait()
	close(w.done) // stops the monitor
	// Let every request in flight land and every deadline pass; then any
	// request is from a goroutine that outlived its call.
	time.Sleep(10 * time.Second)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.finalChecks()
	return w
}

// simStoreKey is the store key that every holder of the lock name
// increments.
func simStoreKey(name string) string { return "counter/" + name }

var (
	errSimFn    = errors.New("sim: the function failed")
	errSimPanic = errors.New("sim: the function panicked")
)

// run is one process's program: one to three sessions, each a plain lease,
// a Do or TryDo, or a Lead.
func (p *simProc) run(names []string) {
	sessions := 1 + p.intN(3)
	for range sessions {
		name := names[p.intN(len(names))]
		ttl := p.between(20*time.Millisecond, 120*time.Millisecond)
		switch p.intN(3) {
		case 0:
			p.leaseSession(name, ttl)
		case 1:
			p.doSession(name, ttl)
		case 2:
			p.leadSession(name, ttl)
		}
		time.Sleep(p.between(0, 50*time.Millisecond))
	}
}

// leaseSession acquires (Acquire or TryAcquire, with or without
// keep-alive), works, and releases.
func (p *simProc) leaseSession(name string, ttl time.Duration) {
	w := p.w
	ctx, cancel := context.WithTimeout(context.Background(), p.between(10*time.Millisecond, 400*time.Millisecond))
	defer cancel()
	keepAlive := p.chance(0.5)
	var (
		l   *Lease
		err error
	)
	if p.chance(0.3) {
		l, err = p.client.TryAcquire(ctx, name, ttl, WithKeepAlive(keepAlive))
	} else {
		l, err = p.client.Acquire(ctx, name, ttl, WithKeepAlive(keepAlive))
	}
	if (l == nil) == (err == nil) {
		w.fail("Acquire returned lease %v and error %v", l != nil, err)
		return
	}
	if err != nil {
		if !errors.Is(err, ErrNotAcquired) {
			w.fail("Acquire: %v; want an error matching ErrNotAcquired", err)
		}
		return
	}
	w.watch(l)
	var v simLeaseView
	for steps := 1 + p.intN(5); steps > 0 && p.work(nil, l, keepAlive, &v); steps-- {
	}
	w.letGo(l.owner)
	for try := 0; try < 2; try++ {
		rctx, cancel := context.WithTimeout(context.Background(), p.between(time.Millisecond, ttl))
		err := l.Release(rctx)
		cancel()
		lerr := l.Err()
		if err == nil {
			if lerr == nil {
				w.fail("Release returned nil but Err is nil")
			}
			break
		}
		if errors.Is(err, ErrNotHeld) {
			if !errors.Is(err, ErrLost) || !errors.Is(lerr, ErrLost) {
				w.fail("Release: %v, Err %v; want both to match ErrLost", err, lerr)
			}
			break
		}
		if errors.Is(lerr, ErrReleased) {
			w.fail("Release failed (%v) but Err says released", err)
		}
	}
	w.finish(l.owner, "Release")
	p.checkEvents(l, v)
}

// doSession runs Do or TryDo with a function that works under the lease and
// then returns nil, fails, panics, or waits for its context to end.
func (p *simProc) doSession(name string, ttl time.Duration) {
	w := p.w
	ctx, cancel := context.WithTimeout(context.Background(), p.between(10*time.Millisecond, 400*time.Millisecond))
	defer cancel()
	keepAlive := !p.chance(0.2)
	mode := p.intN(5)
	var (
		ran          bool
		lease        *Lease
		lostAtReturn bool
		v            simLeaseView
	)
	fn := func(fctx context.Context, l *Lease) error {
		ran, lease = true, l
		w.watch(l)
		for steps := 1 + p.intN(5); steps > 0 && p.work(fctx, l, keepAlive, &v); steps-- {
		}
		if mode == 3 {
			<-fctx.Done()
		}
		w.letGo(l.owner)
		lostAtReturn = errors.Is(l.Err(), ErrLost)
		switch mode {
		case 1:
			return errSimFn
		case 2:
			panic(errSimPanic)
		case 3:
			return context.Cause(fctx)
		case 4:
			rctx, cancel := context.WithTimeout(context.Background(), ttl/2)
			defer cancel()
			_ = l.Release(rctx) // Do's function may release the lease itself
		}
		return nil
	}
	try := p.chance(0.3)
	err, recovered := func() (err error, recovered any) {
		defer func() { recovered = recover() }()
		if try {
			return p.client.TryDo(ctx, name, ttl, fn, WithKeepAlive(keepAlive)), nil
		}
		return p.client.Do(ctx, name, ttl, fn, WithKeepAlive(keepAlive)), nil
	}()
	if lease != nil {
		w.finish(lease.owner, "Do")
	}
	switch {
	case !ran:
		if recovered != nil || !errors.Is(err, ErrNotAcquired) {
			w.fail("Do without running fn: %v (panic %v); want ErrNotAcquired", err, recovered)
		}
		return
	case mode == 2:
		if recovered != errSimPanic {
			w.fail("Do's function panicked, but Do's caller recovered %v", recovered)
		}
		if lease.Err() == nil && lease.deadlineFar() {
			// Do releases on every exit path: the lease is released,
			// lost, or (release outcome unknown twice) left to expire.
			w.mu.Lock()
			if w.releasesSent[lease.owner] == 0 {
				w.failLocked("Do's function panicked and Do did not release the lease")
			}
			w.mu.Unlock()
		}
	case recovered != nil:
		w.fail("Do panicked with %v although fn did not", recovered)
	case mode == 1 && !errors.Is(err, errSimFn):
		w.fail("Do: %v; want fn's error", err)
	case lostAtReturn && !errors.Is(err, ErrLost):
		w.fail("Do: %v; the lease was lost when fn returned, want ErrLost", err)
	case err == nil && lease.Err() == nil:
		// Released, or lost locally while a release that landed was in
		// flight: either way it has ended.
		w.fail("Do returned nil but the lease has not ended")
	}
	p.checkEvents(lease, v)
}

// leadSession runs Lead until its context ends or fn returns while leading.
func (p *simProc) leadSession(name string, ttl time.Duration) {
	w := p.w
	ctx, cancel := context.WithTimeout(context.Background(), p.between(30*time.Millisecond, 500*time.Millisecond))
	defer cancel()
	var (
		terms   []fence.Token
		leases  []*Lease
		views   []*simLeaseView
		results []error
	)
	fn := func(fctx context.Context, ld *Leadership) error {
		term := ld.Term()
		if len(terms) > 0 && term <= terms[len(terms)-1] {
			w.fail("Lead ran fn for term %d after term %d", term, terms[len(terms)-1])
		}
		terms = append(terms, term)
		l := ld.Lease()
		leases = append(leases, l)
		v := &simLeaseView{}
		views = append(views, v)
		w.watch(l)
		for steps := 1 + p.intN(5); steps > 0 && p.work(fctx, l, true, v); steps-- {
		}
		var err error
		switch p.intN(3) {
		case 1:
			err = errSimFn
		case 2:
			<-fctx.Done()
			err = context.Cause(fctx)
		}
		w.letGo(l.owner)
		results = append(results, err)
		return err
	}
	err := p.client.Lead(ctx, name, ttl, fn)
	for _, l := range leases {
		w.finish(l.owner, "Lead")
	}
	switch {
	case err == nil && (len(results) == 0 || results[len(results)-1] != nil):
		w.fail("Lead returned nil, but its last fn returned %v", results)
	case errors.Is(err, errSimFn) && !slices.Contains(results, errSimFn):
		w.fail("Lead returned fn's error, but no fn returned it")
	}
	for i, l := range leases {
		p.checkEvents(l, *views[i])
	}
}

// simLeaseView is what an actor saw of its lease: how many of its fenced
// writes were refused as stale, and whether it saw the lease end.
type simLeaseView struct {
	stale     int
	sawEnded  bool
	sawPassed bool // saw the local deadline pass
}

// work is one step of a holder under its lease: a pause of the whole
// process past the TTL, a fenced increment, an Extend, two concurrent
// Extends, or plain waiting. fctx is the context Do or Lead gave fn (nil
// for a plain lease). It returns false when the holder should stop: the
// lease ended or a write's outcome is unknown.
func (p *simProc) work(fctx context.Context, l *Lease, keepAlive bool, v *simLeaseView) bool {
	p.gate(0) // a paused process does nothing
	ttl := l.ttlNow()
	switch p.intN(7) {
	case 0:
		time.Sleep(p.between(0, ttl/2))
	case 1:
		p.pause(p.between(ttl/2, 2*ttl))
	case 2, 3:
		if !p.increment(fctx, l, v) {
			return false
		}
	case 4, 5:
		p.extend(l, keepAlive, false, p.extendArgs())
	case 6:
		// Draw both calls' arguments here: the two goroutines start at
		// one instant, in an order the scheduler picks.
		a, b := p.extendArgs(), p.extendArgs()
		var wg sync.WaitGroup
		wg.Go(func() { p.extend(l, keepAlive, true, a) })
		wg.Go(func() {
			// A nanosecond later: which of two calls at one instant
			// takes the renewal slot is the scheduler's choice, and a
			// replay must not depend on it.
			time.Sleep(time.Nanosecond)
			p.extend(l, keepAlive, true, b)
		})
		wg.Wait()
	}
	return p.checkLease(fctx, l, v)
}

// checkLease checks what the holder sees right now: a lease whose Err is
// nil has not passed its deadline (it is right after a pause, too); once
// Err is not nil, Done is closed without time passing and the lease never
// comes back; fn's context ends with the lease. It returns whether the lease
// is live.
func (p *simProc) checkLease(fctx context.Context, l *Lease, v *simLeaseView) bool {
	w := p.w
	p.gate(0)
	err := l.Err()
	now := time.Now()
	deadline := l.Deadline()
	if err == nil {
		if !now.Before(deadline) {
			w.failKind(simBugErrAfterPause, "lease %q token %d: Err is nil %v after its deadline", l.name, l.token, now.Sub(deadline))
		}
		if (v.sawEnded || v.sawPassed) && now.Before(deadline) {
			w.fail("lease %q token %d: Err is nil again after the lease ended or its deadline passed", l.name, l.token)
		}
	} else {
		v.sawEnded = true
		select {
		case <-l.Done():
		case <-time.After(time.Nanosecond):
			w.fail("lease %q token %d: Err is %v but Done is open", l.name, l.token, err)
		}
	}
	if !now.Before(deadline) {
		v.sawPassed = true
	}
	if fctx != nil && fctx.Err() == nil && err != nil {
		// The context ends through context.AfterFunc, on a goroutine of
		// its own: give it the same instant to run.
		time.Sleep(time.Nanosecond)
		if fctx.Err() == nil {
			w.fail("lease %q token %d ended (%v) but fn's context is still live", l.name, l.token, err)
		}
	}
	return err == nil
}

// increment adds one to the store's counter through the lease, raising the
// fence before it reads. It returns false when an outcome is unknown or the
// write was refused: the holder stops writing.
func (p *simProc) increment(fctx context.Context, l *Lease, v *simLeaseView) bool {
	if fctx == nil {
		fctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(fctx, p.between(time.Millisecond, l.ttlNow()))
	defer cancel()
	wr := l.Fenced(simStore{p})
	stale := func(err error) bool {
		if errors.Is(err, fence.ErrStale) {
			v.stale++
		}
		return false
	}
	if err := wr.Advance(ctx, simStoreKey(l.name)); err != nil {
		return stale(err)
	}
	rec, err := wr.Get(ctx, simStoreKey(l.name))
	if err != nil && !errors.Is(err, fence.ErrNotFound) {
		return false
	}
	if err := wr.Put(ctx, simStoreKey(l.name), []byte(strconv.Itoa(simCounter(rec.Value)+1))); err != nil {
		return stale(err)
	}
	return true
}

// extend calls Extend with a TTL that may be shorter or longer than the
// lease's, and a context that may end before the reply, and checks what it
// returns.
func (p *simProc) extend(l *Lease, keepAlive, concurrent bool, args simExtendArgs) {
	w := p.w
	ttl := args.ttl
	ctx := context.Background()
	if args.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, args.timeout)
		defer cancel()
	}
	// The local deadline while the call waits: the one before it, or the
	// one the call itself would set, if earlier (it moves in at once).
	before := l.Deadline()
	if d := time.Now().Add(ttl - l.client.opts.drift(ttl)); d.Before(before) {
		before = d
	}
	err := l.Extend(ctx, ttl)
	now := time.Now()
	switch {
	case err == nil:
		w.mu.Lock()
		w.stats.extended++
		w.mu.Unlock()
		if !keepAlive && !concurrent && !now.Before(before) {
			w.fail("Extend returned nil for a reply that came %v after the local deadline", now.Sub(before))
		}
		w.checkBelief(l, "Extend returned nil")
	case errors.Is(err, ErrNotHeld):
		if !errors.Is(err, ErrLost) && !errors.Is(err, ErrReleased) {
			w.fail("Extend: %v; want ErrLost or ErrReleased with ErrNotHeld", err)
		}
		if l.Err() == nil {
			w.fail("Extend: %v, but Err is nil", err)
		}
	case errors.Is(err, ErrLost):
		if !errors.Is(l.Err(), ErrLost) {
			w.fail("Extend: %v, but Err is %v", err, l.Err())
		}
	case errors.Is(err, ErrInvalid):
		w.fail("Extend(%v): %v", ttl, err)
	}
}

// simExtendArgs are an Extend's TTL and its context's timeout (0: none).
type simExtendArgs struct{ ttl, timeout time.Duration }

func (p *simProc) extendArgs() simExtendArgs {
	a := simExtendArgs{ttl: p.between(15*time.Millisecond, 150*time.Millisecond)}
	if p.chance(0.5) {
		a.timeout = p.between(time.Millisecond, a.ttl)
	}
	return a
}

// ttlNow returns the lease's current TTL.
func (l *Lease) ttlNow() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// deadlineFar reports whether the lease's local deadline is still ahead.
func (l *Lease) deadlineFar() bool { return time.Now().Before(l.Deadline()) }

// simRecorder is a process's Observer: it checks that each lease's events
// come one at a time, in an order that makes sense, each terminal event
// once.
type simRecorder struct {
	w    *simWorld
	proc int

	mu     sync.Mutex
	events map[string][]eventKind // per lease (name and token), in delivery order
	in     map[string]bool        // a callback for this lease is running
	stale  map[string]int
}

func simLeaseID(name string, token fence.Token) string {
	return name + "/" + strconv.FormatUint(uint64(token), 10)
}

func terminal(k eventKind) bool { return k == eventReleased || k == eventLost }

func (r *simRecorder) observe(e Event) {
	if e.kind == eventRetrying {
		return // no lease yet
	}
	id := simLeaseID(e.Name, e.Token)
	r.w.tracef("p%d event %v %s %v", r.proc, e.kind, id, e.Err)
	r.mu.Lock()
	seq := r.events[id]
	ended := slices.ContainsFunc(seq, terminal)
	switch {
	case r.in[id]:
		r.w.fail("process %d: %v for %s while another callback of the lease runs", r.proc, e.kind, id)
	case e.kind == eventAcquired && len(seq) > 0:
		r.w.fail("process %d: acquired for %s after %v", r.proc, id, seq)
	case e.kind != eventAcquired && len(seq) == 0:
		r.w.fail("process %d: %v for %s before acquired", r.proc, e.kind, id)
	case terminal(e.kind) && ended:
		r.w.fail("process %d: %v for %s after %v", r.proc, e.kind, id, seq)
	case e.kind == eventExtended && ended:
		r.w.fail("process %d: extended for %s after %v", r.proc, id, seq)
	}
	r.in[id] = true
	r.events[id] = append(seq, e.kind)
	r.mu.Unlock()
	r.w.mu.Lock()
	switch e.kind {
	case eventReleased:
		r.w.stats.released++
	case eventLost:
		r.w.stats.lost++
		if e.Cause() == "late-reply" {
			r.w.stats.lateReplies++
		}
	}
	r.w.mu.Unlock()
	r.mu.Lock()
	r.in[id] = false
	r.mu.Unlock()
}

// checkEvents checks, when the actor is done with l, that every stale
// refusal it got reached the Observer.
func (p *simProc) checkEvents(l *Lease, v simLeaseView) {
	id := simLeaseID(l.name, l.token)
	p.rec.mu.Lock()
	n := 0
	for _, k := range p.rec.events[id] {
		if k == eventStale {
			n++
		}
	}
	p.rec.mu.Unlock()
	if n != v.stale {
		p.w.fail("lease %s: %d stale refusals, %d stale events", id, v.stale, n)
	}
}

// finalChecks runs after the schedule settled: every lease has ended, Done
// is closed, and its last terminal event says what Err says.
func (w *simWorld) finalChecks() {
	for _, p := range w.procs {
		for _, l := range w.watched {
			if l.client != p.client {
				continue
			}
			err := l.Err()
			select {
			case <-l.Done():
			default:
				w.fail("lease %q token %d: Done still open at the end (Err %v)", l.name, l.token, err)
				continue
			}
			p.rec.mu.Lock()
			seq := p.rec.events[simLeaseID(l.name, l.token)]
			p.rec.mu.Unlock()
			var last eventKind
			for _, k := range seq {
				if terminal(k) {
					last = k
				}
			}
			switch {
			case errors.Is(err, ErrReleased) && last != eventReleased,
				errors.Is(err, ErrLost) && last != eventLost:
				w.fail("lease %q token %d: Err %v but the Observer saw %v", l.name, l.token, err, seq)
			}
		}
	}
}
