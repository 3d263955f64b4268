package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// ContentionConfig describes a contention run (RunContention): a busy lock,
// a busy semaphore and a busy read-write lock on one backend, all at once,
// while faults hit them, then a quiet time in which every worker must be
// served within the run's service bound.
type ContentionConfig struct {
	Backend driver.Backend
	Store   fence.Store
	// Name labels the report (the backend's name).
	Name string

	// Workers contend for one lock name; default 16.
	Workers int
	// SemaphoreWorkers contend for one semaphore of Permits permits;
	// default 8 over 4 permits.
	SemaphoreWorkers int
	Permits          int
	// RWWorkers read and write under one read-write lock; default 6.
	RWWorkers int

	// Faults is how long faults start; default 10s. Quiet is the
	// fault-free time, from when the last fault has ended (a restart may
	// take a while), in which the service bound is checked; default the
	// bound plus 3s.
	Faults time.Duration
	Quiet  time.Duration

	// TTL is every lease's TTL; default 500ms. PlaceTTL is the Clients'
	// place TTL; default 1s.
	TTL      time.Duration
	PlaceTTL time.Duration
	// CycleCost is what one cycle may cost beyond its work (its round
	// trips and the handoff to the next waiter) in the service bound;
	// default 100ms.
	CycleCost time.Duration

	Seed uint64 // 0: random

	// Network, when set, gets random faults (delays, cuts, lost replies)
	// on average every FaultEvery (default 500ms), delays up to MaxDelay
	// (default 2 TTLs).
	Network    Network
	FaultEvery time.Duration
	MaxDelay   time.Duration

	// Restart, when set, restarts or fails over the server (with waiters
	// in line, as there always are here) and returns once it serves
	// again; it is called once at a random time in every RestartEvery
	// (default half of Faults, at most 10s). ServerForgets says that a restart loses the live leases
	// and permits (a server without persistence, an asynchronous
	// failover): two live holders are then a figure, not a violation.
	Restart       func(ctx context.Context) error
	RestartEvery  time.Duration
	ServerForgets bool

	// PauseChance, CancelChance and KillChance are each cycle's chances of
	// a pause past the TTL, a wait given up and a waiter killed in line;
	// defaults 0.1, 0.15 and 0.15, negative for none (a wait shorter than
	// the 0.1 to 1 TTL after which it is given up or killed is not cut, so
	// a fast backend sees a fraction of these).
	PauseChance  float64
	CancelChance float64
	KillChance   float64

	// Probe, when set, reports what the backend holds in this process
	// and on the server (open connections, server-side keys or rows),
	// for the samples a soak compares; goroutines and heap are sampled
	// without it.
	Probe func(ctx context.Context) (map[string]int64, error)
	// SampleEvery, when above zero, samples the process and the Probe
	// every so often during the faults, after the first sample at the
	// warm-up's end; a soak sets it.
	SampleEvery time.Duration
}

func (c *ContentionConfig) setDefaults() error {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Workers, 16)
	def(&c.SemaphoreWorkers, 8)
	def(&c.Permits, 4)
	def(&c.RWWorkers, 6)
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&c.Faults, 10*time.Second)
	defDur(&c.TTL, 500*time.Millisecond)
	defDur(&c.PlaceTTL, time.Second)
	defDur(&c.CycleCost, 100*time.Millisecond)
	defDur(&c.FaultEvery, 500*time.Millisecond)
	defDur(&c.MaxDelay, 2*c.TTL)
	defDur(&c.RestartEvery, min(c.Faults/2, 10*time.Second))
	defDur(&c.Quiet, c.bound()+3*time.Second)
	defChance := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	defChance(&c.PauseChance, 0.1)
	defChance(&c.CancelChance, 0.15)
	defChance(&c.KillChance, 0.15)
	if c.Seed == 0 {
		c.Seed = mrand.Uint64()
	}
	if c.Backend == nil || c.Store == nil {
		return fence.Invalid("chaos: ContentionConfig needs a Backend and a Store")
	}
	return nil
}

// Bound is the service bound: once the faults have cleared, no worker
// waits longer than this for its lease or permit. A paused holder's lease
// runs out within a TTL, the place of a waiter killed in line within a
// place TTL (twice, for a place renewed just before its waiter died), and
// then each worker ahead in line takes one cycle: its work (up to a tenth
// of the TTL) and CycleCost. The busiest shape, the lock, sets it. Fields
// left at zero count at their defaults.
func (c ContentionConfig) Bound() time.Duration {
	_ = c.setDefaults() // a copy: only the defaults matter here
	return c.bound()
}

// bound is Bound once the defaults are set.
func (c *ContentionConfig) bound() time.Duration {
	return c.TTL + 2*c.PlaceTTL + time.Duration(c.Workers)*(c.TTL/10+c.CycleCost)
}

// faultPhase is the fault schedule the runs of a contention run share:
// faults start only before end, and cleared is when the last one had ended.
type faultPhase struct {
	end   time.Time
	bound time.Duration
	quiet time.Duration
	done  chan struct{} // closed once the faults have cleared

	mu      sync.Mutex
	cleared time.Time
}

func (p *faultPhase) faulting() bool { return time.Now().Before(p.end) }

func (p *faultPhase) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleared = time.Now()
	close(p.done)
}

// runFor returns a context that ends Quiet after the faults have cleared
// (or when ctx does), for the workers of one of the runs.
func (p *faultPhase) runFor(ctx context.Context) (context.Context, context.CancelFunc) {
	runCtx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-p.done:
			sleep(runCtx, p.quiet)
		case <-runCtx.Done():
		}
		cancel()
	}()
	return runCtx, cancel
}

func (p *faultPhase) clearedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cleared
}

// ContentionReport is what a contention run found: a report per shape, and
// the faults that hit them all.
type ContentionReport struct {
	Name      string
	Seed      uint64
	Bound     time.Duration
	Lock      *Report
	Semaphore *PermitReport
	RW        *PermitReport

	Delays, Cuts, Drops int // network faults
	Restarts            int // server restarts or failovers
	RestartFailures     int // restarts that returned an error
	// LeftWaiting and LeftHolding count the places and leases still live
	// on the run's names when the run ended and a place TTL had passed
	// (must both be 0); Left names the first such name.
	LeftWaiting, LeftHolding int
	Left                     string
	Elapsed                  time.Duration
	// Samples are the process's and the backend's figures: "before" the
	// run; during the faults after the warm-up (a tenth of the faults, at
	// most a minute) and then every SampleEvery, each labelled by when
	// ("t=1m0s"); and "after" the run, once every place and lease is gone.
	Samples []Sample
}

// Sample is what the process and the backend hold at one moment of a run:
// "goroutines" and "heap_bytes" (after a collection), and what the
// configuration's Probe reports.
type Sample struct {
	At      string
	Elapsed time.Duration // from the start of the run
	Figures map[string]int64
}

// probeRetry is how long a sample tries its Probe again: longer than a
// restart of any of the test servers takes.
const probeRetry = 30 * time.Second

// sample takes a Sample labelled at.
func (c *ContentionConfig) sample(ctx context.Context, at string) (Sample, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := Sample{At: at, Figures: map[string]int64{"goroutines": int64(runtime.NumGoroutine()), "heap_bytes": int64(ms.HeapAlloc)}}
	if c.Probe == nil {
		return s, nil
	}
	// A restart may be under way: the probe is tried again for a while.
	deadline := time.Now().Add(probeRetry)
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		figs, err := c.Probe(pctx)
		cancel()
		if err == nil {
			maps.Copy(s.Figures, figs)
			return s, nil
		}
		if !time.Now().Before(deadline) || !sleep(ctx, 200*time.Millisecond) {
			return s, fmt.Errorf("chaos: probe %s: %w", at, err)
		}
	}
}

// Violations lists what went wrong, in words, each prefixed by its shape.
func (r *ContentionReport) Violations() []string {
	var v []string
	for _, part := range []struct {
		name string
		vs   []string
	}{{"lock", r.Lock.Violations()}, {"semaphore", r.Semaphore.Violations()}, {"rw", r.RW.Violations()}} {
		for _, s := range part.vs {
			v = append(v, part.name+": "+s)
		}
	}
	if r.LeftWaiting > 0 || r.LeftHolding > 0 {
		v = append(v, fmt.Sprintf("%d places and %d leases still live after the run (first on %s)", r.LeftWaiting, r.LeftHolding, r.Left))
	}
	if r.RestartFailures > 0 {
		v = append(v, fmt.Sprintf("%d restarts failed", r.RestartFailures))
	}
	return v
}

// Print writes the report for people: the faults, then each shape's
// report.
func (r *ContentionReport) Print(w io.Writer) {
	fmt.Fprintf(w, "contention run on %s: seed %d, %v, service bound %v\n", r.Name, r.Seed, r.Elapsed.Round(time.Millisecond), r.Bound)
	fmt.Fprintf(w, "faults: %d delays, %d cuts, %d lost replies, %d restarts (%d failed)\n", r.Delays, r.Cuts, r.Drops, r.Restarts, r.RestartFailures)
	var pauses, cancels, kills int
	for _, rep := range []*Report{r.Lock, r.Semaphore.Report, r.RW.Report} {
		pauses, cancels, kills = pauses+rep.Pauses, cancels+rep.Cancels, kills+rep.Kills
	}
	fmt.Fprintf(w, "workers: %d pauses past the TTL, %d waits given up, %d waiters killed in line\n", pauses, cancels, kills)
	fmt.Fprintf(w, "left after the run: %d places, %d leases\n", r.LeftWaiting, r.LeftHolding)
	for _, s := range r.Samples {
		keys := slices.Sorted(maps.Keys(s.Figures))
		fmt.Fprintf(w, "sample %-6s", s.At)
		for _, k := range keys {
			fmt.Fprintf(w, " %s=%d", k, s.Figures[k])
		}
		fmt.Fprintln(w)
	}
	for _, part := range []struct {
		name string
		rep  interface{ Print(io.Writer) }
	}{{"lock", r.Lock}, {"semaphore", r.Semaphore}, {"rw", r.RW}} {
		fmt.Fprintf(w, "--- %s\n", part.name)
		part.rep.Print(w)
	}
	for _, s := range []*Service{r.Lock.Service, r.Semaphore.Service, r.RW.Service} {
		if s != nil {
			s.Print(w)
		}
	}
}

// RunContention runs cfg.Workers workers on one lock, cfg.SemaphoreWorkers
// on one semaphore and cfg.RWWorkers on one read-write lock at once, each
// doing fenced read-modify-writes of its shape's counters (Run, RunPermits)
// while, for cfg.Faults, workers pause past their TTL, give up waits and
// are killed in line, the network fails and the server restarts. Then,
// for cfg.Quiet, no fault starts, and every wait that runs after the last
// fault cleared must end within the service bound. Each shape's history
// is checked as Run and RunPermits check it; at the end no place and no
// lease may be left on any of the run's names.
func RunContention(ctx context.Context, cfg ContentionConfig) (*ContentionReport, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	phase := &faultPhase{end: start.Add(cfg.Faults), bound: cfg.bound(), quiet: cfg.Quiet, done: make(chan struct{})}
	prefix := fmt.Sprintf("contention:%x:", cfg.Seed^uint64(start.UnixNano()))
	base := Config{
		Backend: cfg.Backend, Store: cfg.Store, Name: cfg.Name,
		Duration: cfg.Faults + cfg.Quiet, TTL: cfg.TTL, Seed: cfg.Seed,
		LeasesLost: cfg.ServerForgets, PauseChance: cfg.PauseChance,
		Network: cfg.Network, MaxDelay: cfg.MaxDelay,
		PlaceTTL: cfg.PlaceTTL, CancelChance: cfg.CancelChance, KillChance: cfg.KillChance,
		phase: phase,
	}
	lockCfg := base
	lockCfg.Workers, lockCfg.Keys, lockCfg.Prefix = cfg.Workers, 1, prefix+"lock:"
	semCfg := PermitConfig{Config: base, Shape: ShapeSemaphore, Permits: cfg.Permits, ServerForgets: cfg.ServerForgets}
	semCfg.Workers, semCfg.Keys, semCfg.Prefix, semCfg.Seed = cfg.SemaphoreWorkers, 1, prefix+"sem:", cfg.Seed+1
	rwCfg := PermitConfig{Config: base, Shape: ShapeRW, ServerForgets: cfg.ServerForgets}
	rwCfg.Workers, rwCfg.Keys, rwCfg.Prefix, rwCfg.Seed = cfg.RWWorkers, 1, prefix+"rw:", cfg.Seed+2

	rep := &ContentionReport{Name: cfg.Name, Seed: cfg.Seed, Bound: phase.bound}
	before, err := cfg.sample(ctx, "before")
	if err != nil {
		return nil, err
	}
	rep.Samples = append(rep.Samples, before)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); injectContentionFaults(ctx, &cfg, phase, rep) }()
	var sampleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// During the faults: after the warm-up, then every SampleEvery.
		every := cfg.SampleEvery
		next := min(cfg.Faults/10, time.Minute)
		for sleep(ctx, time.Until(start.Add(next))) && time.Now().Before(phase.end) {
			s, err := cfg.sample(ctx, "t="+next.Round(time.Millisecond).String())
			if err != nil {
				sampleErr = err
				return
			}
			s.Elapsed = time.Since(start)
			rep.Samples = append(rep.Samples, s)
			if every <= 0 {
				return
			}
			next += every
		}
	}()
	var lockErr, semErr, rwErr error
	wg.Add(3)
	go func() { defer wg.Done(); rep.Lock, lockErr = Run(ctx, lockCfg) }()
	go func() { defer wg.Done(); rep.Semaphore, semErr = RunPermits(ctx, semCfg) }()
	go func() { defer wg.Done(); rep.RW, rwErr = RunPermits(ctx, rwCfg) }()
	wg.Wait()
	if err := errors.Join(lockErr, semErr, rwErr, sampleErr); err != nil {
		return nil, err
	}
	names := []struct {
		name string
		kind driver.Kind
	}{{lockCfg.lockName(0), driver.Exclusive}, {semCfg.names()[0], driver.Semaphore}, {rwCfg.names()[0], driver.Write}}
	// Every wait has ended; a place of a waiter killed in line, or a
	// lease granted as its waiter died, lasts a place TTL or a TTL at
	// most. Poll until both have passed, with margin for a loaded machine.
	deadline := time.Now().Add(max(cfg.PlaceTTL, cfg.TTL) + 3*time.Second)
	for {
		rep.LeftWaiting, rep.LeftHolding, rep.Left = 0, 0, ""
		for _, n := range names {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			info, err := cfg.Backend.Inspect(ictx, n.name, n.kind)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("chaos: inspect %s after the run: %w", n.name, err)
			}
			if info.Waiting > 0 || len(info.Holders) > 0 {
				rep.LeftWaiting += info.Waiting
				rep.LeftHolding += len(info.Holders)
				if rep.Left == "" {
					rep.Left = n.name
				}
			}
		}
		if rep.LeftWaiting+rep.LeftHolding == 0 || !time.Now().Before(deadline) || !sleep(ctx, 50*time.Millisecond) {
			break
		}
	}
	// The shapes share the network: each report shows its faults.
	for _, r := range []*Report{rep.Lock, rep.Semaphore.Report, rep.RW.Report} {
		r.Delays, r.Cuts, r.Drops = rep.Delays, rep.Cuts, rep.Drops
	}
	rep.Elapsed = time.Since(start)
	after, err := cfg.sample(ctx, "after")
	if err != nil {
		return nil, err
	}
	after.Elapsed = time.Since(start)
	rep.Samples = append(rep.Samples, after)
	return rep, nil
}

// injectContentionFaults hits the network and restarts the server at
// random until the phase's faults end, then heals the network and marks
// the faults cleared once the last restart has returned.
func injectContentionFaults(ctx context.Context, cfg *ContentionConfig, phase *faultPhase, rep *ContentionReport) {
	defer phase.clear()
	fctx, cancel := context.WithDeadline(ctx, phase.end)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	count := func(n *int) { mu.Lock(); *n++; mu.Unlock() }
	if cfg.Network != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cfg.Network.Heal()
			rng := mrand.New(mrand.NewPCG(cfg.Seed, 1<<33))
			for {
				if !sleep(fctx, time.Duration(rng.ExpFloat64()*float64(cfg.FaultEvery))) {
					return
				}
				switch p := rng.Float64(); {
				case p < 0.4:
					count(&rep.Delays)
					cfg.Network.Delay(time.Duration(float64(cfg.MaxDelay) * (0.25 + 0.75*rng.Float64())))
					ok := sleep(fctx, time.Duration(float64(cfg.TTL)*(2+4*rng.Float64())))
					cfg.Network.Delay(0)
					if !ok {
						return
					}
				case p < 0.7:
					count(&rep.Cuts)
					cfg.Network.Cut()
				default:
					count(&rep.Drops)
					cfg.Network.DropReply()
				}
			}
		}()
	}
	if cfg.Restart != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One restart at a random time in each RestartEvery, so that a
			// short run restarts too.
			rng := mrand.New(mrand.NewPCG(cfg.Seed, 1<<34))
			for {
				at := time.Duration(float64(cfg.RestartEvery) * (0.2 + 0.6*rng.Float64()))
				if !sleep(fctx, at) {
					return
				}
				count(&rep.Restarts)
				// The restart itself is not cut short when the faults
				// end: the server must be back before they have cleared.
				began := time.Now()
				if err := cfg.Restart(ctx); err != nil {
					count(&rep.RestartFailures)
				}
				if !sleep(fctx, cfg.RestartEvery-at-time.Since(began)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	<-fctx.Done() // with nothing to inject, the faults are the workers' own until the end
}
