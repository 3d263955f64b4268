// Package chaos runs workers that increment shared counters under a lock
// while faults hit them, records every operation, and checks the history:
// no stale write may land, no increment may be lost, and the fencing tokens
// of every lock must only go up.
//
// Each worker loops: pick a key, acquire the key's lock (lock.Client.Acquire,
// no keep-alive), then read-modify-write the key through the lease's fenced
// writer: Advance, Get, Put of the value plus one. Random pauses longer than
// the TTL stop a worker in the middle, as a garbage collector or a frozen VM
// would, so its lease expires and another worker takes the lock; the paused
// worker then carries on and writes as if nothing happened. Network faults
// (delays, cut connections, lost replies) come from a Network, usually a
// fault-injecting proxy between the workers and the server.
//
// The history is checked four ways: porcupine against a fenced-register
// model per key and a token-monotonicity model per lock, direct counts
// (stale writes accepted, lost increments), and the recorded acquisitions
// and releases for two live holders of one lock (exclusion.go). With
// Config.Unfenced the workers do the same work with the lock alone and
// plain writes; the checker must then report lost increments, which shows
// that it can fail.
//
// With Config.Sets each cycle takes a set of two or three keys' locks at
// once (lock.Client.DoMulti) and increments every key of the set, each write
// fenced by its own name's token (sets.go); the run must then also keep
// making progress, as a lock that deadlocks would not (progress.go).
//
// RunResume (resume.go) drops each lease half way through its cycle and has
// a new Client adopt it by its owner (lock.Client.Resume) and write on with
// the same token; RunPermits (permits.go) runs the workers over semaphore
// and read-write permits.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Network injects faults between the workers and the server. *Proxy from
// internal/testkit provides one through ProxyNetwork.
type Network interface {
	// Delay adds d of latency to every request and reply; 0 removes it.
	Delay(d time.Duration)
	// Cut cuts every open connection.
	Cut()
	// DropReply discards the reply to the next request the server
	// executes, and cuts that connection.
	DropReply()
	// Heal removes every fault.
	Heal()
}

// Config describes a run. Backend and Store are required; the rest has
// defaults.
type Config struct {
	Backend driver.Backend
	Store   fence.Store
	// Name labels the report (the backend's name).
	Name string

	// Polling makes the workers poll for their locks instead of waiting
	// in line (lock.QueueOptions.Polling): more acquisitions and more
	// overlaps in a short unfenced run.
	Polling bool

	// Sets makes each cycle take the locks of a set of 2 or 3 keys with
	// lock.Client.DoMulti (no keep-alive) and increment every key of the
	// set, each write fenced by its own name's token. The sets are drawn
	// from the Keys keys in random order, so that they overlap and two
	// workers ask for the same names in opposite orders.
	Sets bool

	Workers  int           // default 4
	Keys     int           // shared keys, each with its own lock; default 3, or 4 with Sets
	Duration time.Duration // how long workers start new cycles; default 3s
	TTL      time.Duration // lease TTL; default 100ms
	Seed     uint64        // 0: random

	// Unfenced makes the workers write without fencing: no Advance, and
	// every Put carries the same token, so the store accepts it whatever
	// lease it comes from. The lock alone then has to keep increments
	// apart, and cannot.
	Unfenced bool

	// Transfer (with Sets) makes each set cycle move an amount (1 to 5)
	// from the counter of one name of the set to that of another instead
	// of incrementing each: each half fenced by its own name's token. The
	// checker then follows each counter's chain of writes (each names the
	// write it read) for lost updates, and counts the transfers of which
	// only one half landed (torn: per-name fencing cannot prevent them).
	Transfer bool

	// LeasesLost says that the lock server may lose live leases during the
	// run (it is killed and restarts empty): another owner may then take a
	// name whose holder still had time left, by design of the run, so two
	// live holders are reported as a figure and not as a violation.
	LeasesLost bool

	// PauseChance is the probability that a cycle pauses its worker for
	// 1.2 to 2.5 TTLs at a random step; default 0.15, negative for none.
	PauseChance float64
	// Work is the longest time a worker spends between its read and its
	// write; default TTL/10.
	Work time.Duration

	// Network, when set, gets random faults during the run: on average one
	// every FaultEvery (default 500ms). Delays last 2 to 6 TTLs and add up
	// to MaxDelay (default 2 TTLs).
	Network    Network
	FaultEvery time.Duration
	MaxDelay   time.Duration

	// OpTimeout bounds each store or lock call; default 10 TTLs, at least
	// one second.
	OpTimeout time.Duration
	// CheckTimeout bounds each porcupine check of one segment; default 30s.
	CheckTimeout time.Duration
	// StallLimit is, in set mode, the longest time before the end of the
	// run in which no worker may acquire a set: longer, and the checker
	// calls it a loss of progress, as a deadlock would be. Default: the
	// largest of 2 OpTimeouts, 20 TTLs and 5 s, above what the faults and a
	// loaded machine cause.
	StallLimit time.Duration
	// Prefix starts every lock name and key; default a random one.
	Prefix string

	// PlaceTTL is the Client's place TTL (lock.QueueOptions.PlaceTTL): how
	// long the place of a waiter killed in line holds up the ones behind
	// it. 0 leaves the Client's default.
	PlaceTTL time.Duration
	// CancelChance is the probability that a cycle's caller gives up its
	// wait after 0.1 to 1 TTL (its context ends, and the Client leaves
	// the line); 0 for none.
	CancelChance float64
	// KillChance is the probability that a cycle's waiter is killed in
	// line after 0.1 to 1 TTL: from then on its Client's backend refuses
	// every call, as a dead process's connection would, so its place (or
	// a lease granted as it died) is left to expire. 0 for none.
	KillChance float64

	// phase, when set, is the fault schedule of a contention run that this
	// run is part of: the faults stop when it says, the contention run
	// itself hits the network, and the run's waits are checked against
	// its service bound once the faults have cleared.
	phase *faultPhase
}

func (c *Config) setDefaults() error {
	if c.Backend == nil || c.Store == nil {
		return fence.Invalid("chaos: Config needs a Backend and a Store")
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Transfer {
		c.Sets = true
	}
	if c.Keys <= 0 {
		c.Keys = 3
		if c.Sets {
			c.Keys = 4
		}
	}
	if c.Sets && c.Keys < 2 {
		return fence.Invalid("chaos: Sets needs at least 2 keys, not %d", c.Keys)
	}
	if c.Duration <= 0 {
		c.Duration = 3 * time.Second
	}
	if c.TTL <= 0 {
		c.TTL = 100 * time.Millisecond
	}
	if c.TTL < 10*time.Millisecond {
		return fence.Invalid("chaos: TTL %v is below 10ms", c.TTL)
	}
	if c.Seed == 0 {
		c.Seed = mrand.Uint64()
	}
	if c.PauseChance == 0 {
		c.PauseChance = 0.15
	}
	if c.Work <= 0 {
		c.Work = c.TTL / 10
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 500 * time.Millisecond
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 2 * c.TTL
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = max(10*c.TTL, time.Second)
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 30 * time.Second
	}
	if c.StallLimit <= 0 {
		c.StallLimit = max(2*c.OpTimeout, 20*c.TTL, 5*time.Second)
	}
	if c.Prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Prefix = "chaos:" + hex.EncodeToString(b[:]) + ":"
	}
	return nil
}

// ambiguity is how long after its caller gave up an operation may still take
// effect: a request the proxy delayed reaches the server at most MaxDelay
// after it was read. The margin covers scheduling and the server's own time.
func (c *Config) ambiguity() time.Duration {
	if c.Network == nil {
		return time.Second
	}
	return c.MaxDelay + time.Second
}

func (c *Config) lockName(k int) string { return fmt.Sprintf("%slock-%d", c.Prefix, k) }
func (c *Config) key(k int) string      { return fmt.Sprintf("%skey-%d", c.Prefix, k) }

// unfencedToken is the token every unfenced Put carries: the same for all,
// so the store never refuses one.
const unfencedToken fence.Token = 1

// maxRetries bounds how often a worker repeats a write whose outcome it did
// not learn.
const maxRetries = 3

// Run runs the workers for cfg.Duration, waits for the last cycles to end,
// reads the final counters and checks the history. It returns an error only
// when the run itself could not be carried out (bad configuration, final
// counters unreadable); violations are in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := newRunner(cfg)
	opts := cfg.clientOptions()
	r.backend = recordingBackend{Backend: cfg.Backend, r: r}
	r.client = lock.New(r.backend, &opts)
	d, err := r.drive(ctx, func(ctx context.Context, w *worker) { w.loop(ctx) })
	if err != nil {
		return nil, err
	}
	rep := r.check(d.hist, d.final)
	rep.Elapsed = d.elapsed
	rep.progress(d.held, d.end, cfg.StallLimit)
	rep.Service = d.service
	return rep, nil
}

// newRunner returns the state the workers of a run of cfg share, without
// its Client.
func newRunner(cfg Config) *runner {
	r := &runner{cfg: cfg, start: time.Now(), inside: make([]int, cfg.Keys), lockIndex: make(map[string]int, cfg.Keys)}
	for k := 0; k < cfg.Keys; k++ {
		r.lockIndex[cfg.lockName(k)] = k
	}
	return r
}

// clientOptions are the options of the Client every run's workers use:
// quick retries, bounded by a quarter of the TTL.
func (cfg Config) clientOptions() lock.Options {
	return lock.Options{
		MinBackoff: time.Millisecond,
		MaxBackoff: max(cfg.TTL/4, 2*time.Millisecond),
		Queue:      lock.QueueOptions{Polling: cfg.Polling, PlaceTTL: cfg.PlaceTTL},
	}
}

// driven is what the workers of a run left behind.
type driven struct {
	hist    []Op      // every worker's ops, the recorded releases and the final reads
	final   []Op      // the final reads
	held    [][]int64 // per worker, when each of its acquisitions was handed to it
	end     int64     // r.now() when the run's time was up: workers start no cycle after it
	elapsed time.Duration
	service *Service // the waits after the faults cleared, in a contention run
}

// drive runs loop in each of cfg.Workers workers until cfg.Duration has
// passed, with the network's faults and each of background alongside, waits
// for every last cycle, heals the network and reads the final counters.
func (r *runner) drive(ctx context.Context, loop func(ctx context.Context, w *worker), background ...func(ctx context.Context)) (driven, error) {
	cfg := r.cfg
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	if cfg.phase != nil {
		runCtx, cancel = cfg.phase.runFor(ctx)
	}
	defer cancel()
	r.stop = cancel
	var bg sync.WaitGroup
	if cfg.Network != nil && cfg.phase == nil {
		background = append(background, r.injectFaults)
	}
	for _, f := range background {
		bg.Add(1)
		go func() { defer bg.Done(); f(runCtx) }()
	}
	workers := make([]*worker, cfg.Workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{r: r, id: i, rng: mrand.New(mrand.NewPCG(cfg.Seed, uint64(i))), waitFrom: -1}
		workers[i] = w
		wg.Add(1)
		go func() { defer wg.Done(); loop(runCtx, w) }()
	}
	<-runCtx.Done()
	d := driven{end: r.now()}
	wg.Wait()
	cancel()
	bg.Wait()
	if cfg.Network != nil {
		cfg.Network.Heal()
	}
	d.elapsed = time.Since(r.start)
	r.mu.Lock()
	unsupported := r.unsupported
	r.mu.Unlock()
	if unsupported != nil {
		return driven{}, fmt.Errorf("chaos: backend %q cannot serve this run (driver.ErrUnsupported): %w", cfg.Name, unsupported)
	}

	d.held = make([][]int64, len(workers))
	for i, w := range workers {
		d.hist = append(d.hist, w.ops...)
		d.held[i] = w.held
	}
	if cfg.phase != nil {
		d.service = r.service(workers, d.end)
	}
	r.mu.Lock()
	d.hist = append(d.hist, r.releases...)
	r.mu.Unlock()
	final, err := r.readFinal(ctx)
	if err != nil {
		return driven{}, err
	}
	d.final = final
	d.hist = append(d.hist, final...)
	return d, nil
}

// runner is the state workers share.
type runner struct {
	cfg       Config
	client    *lock.Client
	backend   driver.Backend // the recording backend client wraps, for the Clients of killed waiters
	start     time.Time
	lockIndex map[string]int // lock name -> key index
	stop      func()         // ends the run early (drive sets it before the workers start)

	mu              sync.Mutex
	unsupported     error // the first driver.ErrUnsupported a worker was given
	releases        []Op  // every Backend.Release call, whoever made it
	inside          []int // per key: workers that believe they hold its lock
	overlaps        int
	pauses          int
	acquisitions    int
	acquireFailures int
	delays          int
	cuts            int
	drops           int
	cancels         int
	kills           int
	nextID          int64
}

func (r *runner) now() int64 { return int64(time.Since(r.start)) }

// faulting reports whether faults may still hit the run: always, but in a
// contention run only until its faults end.
func (r *runner) faulting() bool { return r.cfg.phase == nil || r.cfg.phase.faulting() }

func (r *runner) newID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	return r.nextID
}

// enter records that a worker believes it holds key k's lock, counting an
// overlap when another worker believes so too.
func (r *runner) enter(k int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inside[k] > 0 {
		r.overlaps++
	}
	r.inside[k]++
}

func (r *runner) leave(k int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inside[k]--
}

// failed notes that a worker's acquisition failed with err. A backend that
// answers driver.ErrUnsupported cannot serve the run's shape: the run then
// ends at once, and its Run function returns that error instead of a report.
func (r *runner) failed(ctx context.Context, err error) {
	if errors.Is(err, driver.ErrUnsupported) {
		r.mu.Lock()
		if r.unsupported == nil {
			r.unsupported = err
		}
		r.mu.Unlock()
		r.stop()
		return
	}
	if ctx.Err() == nil {
		r.count(&r.acquireFailures)
	}
}

func (r *runner) count(n *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*n++
}

// injectFaults hits the network at random until ctx ends.
func (r *runner) injectFaults(ctx context.Context) {
	rng := mrand.New(mrand.NewPCG(r.cfg.Seed, 1<<32))
	net := r.cfg.Network
	for {
		wait := time.Duration(rng.ExpFloat64() * float64(r.cfg.FaultEvery))
		if !sleep(ctx, wait) {
			return
		}
		switch p := rng.Float64(); {
		case p < 0.4:
			d := time.Duration(float64(r.cfg.MaxDelay) * (0.25 + 0.75*rng.Float64()))
			r.count(&r.delays)
			net.Delay(d)
			ok := sleep(ctx, time.Duration(float64(r.cfg.TTL)*(2+4*rng.Float64())))
			net.Delay(0)
			if !ok {
				return
			}
		case p < 0.7:
			r.count(&r.cuts)
			net.Cut()
		default:
			r.count(&r.drops)
			net.DropReply()
		}
	}
}

// sleep waits for d or until ctx ends, and reports whether d passed. The
// waits it makes are the faults themselves (how long a delay lasts, how long
// a worker is frozen), never a way to order events.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// readFinal reads every key once the workers are done and the network is
// healed, retrying a failed read a few times.
func (r *runner) readFinal(ctx context.Context) ([]Op, error) {
	var ops []Op
	for k := 0; k < r.cfg.Keys; k++ {
		var lastErr error
		done := false
		for attempt := 0; attempt < 10 && !done; attempt++ {
			call := r.now()
			octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
			rec, err := r.cfg.Store.Get(octx, r.cfg.key(k))
			cancel()
			ret := r.now()
			o, ok, err := getOp(rec, err)
			if ok {
				o.Worker, o.Key, o.Call, o.Return = r.cfg.Workers, k, call, ret
				o.FenceOK = o.FenceOK && !r.cfg.Unfenced
				ops = append(ops, o)
				done = true
			}
			lastErr = err
			if ctx.Err() != nil {
				break
			}
		}
		if !done {
			return nil, fmt.Errorf("chaos: read final value of %s: %w", r.cfg.key(k), lastErr)
		}
	}
	return ops, nil
}

// getOp turns a Get's result into an operation (without times), or reports
// that the read failed. A key that was never written reads as 0.
func getOp(rec fence.Record, err error) (Op, bool, error) {
	o := Op{Kind: Get, Outcome: OK, Fence: int64(rec.Fence), FenceOK: true}
	switch {
	case errors.Is(err, fence.ErrNotFound):
		return o, true, nil
	case err != nil:
		return Op{}, false, err
	}
	n, id, err := decodeValue(rec.Value)
	if err != nil {
		return Op{}, false, err
	}
	o.Value, o.ID = n, id
	return o, true, nil
}

// worker is one of the goroutines doing read-modify-writes.
type worker struct {
	r   *runner
	id  int
	rng *mrand.Rand

	mu   sync.Mutex // record may be called from the backend's goroutines
	ops  []Op
	held []int64 // when each of its leases (or sets) was handed to it, for the progress check

	waits    []wait // in a contention run: each wait for a lease, for the service check
	waitFrom int64  // when the current wait began: the first attempt since the last grant, or -1
}

func (w *worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		if w.r.cfg.Sets {
			w.setCycle(ctx, w.pickSet())
			continue
		}
		w.cycle(ctx, w.rng.IntN(w.r.cfg.Keys))
	}
}

// acquired notes that the worker was handed a lease or a set.
func (w *worker) acquired() {
	w.r.count(&w.r.acquisitions)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = append(w.held, w.r.now())
}

// cycle acquires key k's lock and increments the key once.
func (w *worker) cycle(ctx context.Context, k int) {
	cfg := &w.r.cfg
	// The backend records each attempt that returns a token (see
	// recordingBackend), with that attempt's own window.
	client, actx, granted, done := w.waitFault(ctx)
	defer done()
	w.startWait()
	lease, err := client.Acquire(context.WithValue(actx, attemptKey{}, w), cfg.lockName(k), cfg.TTL)
	if err != nil {
		w.endWait(false)
		w.r.failed(actx, err)
		return
	}
	w.endWait(true)
	if !granted() {
		return // killed as the grant came: the lease is left to expire
	}
	w.acquired()
	w.r.enter(k)
	defer w.r.leave(k)
	defer func() {
		// Best effort: after a pause the lease is long gone (ErrNotHeld).
		rctx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
		_ = lease.Release(rctx)
		cancel()
	}()

	pauseAt := -1
	if cfg.PauseChance > 0 && (w.rng.Float64() < cfg.PauseChance || w.owesFault(anyWorker, &w.r.pauses)) {
		pauseAt = w.rng.IntN(3)
	}
	token := int64(lease.Token())
	key := cfg.key(k)
	store := lease.Fenced(cfg.Store)

	w.maybePause(pauseAt, 0)
	if !cfg.Unfenced {
		if w.write(Advance, k, token, 0, 0, func(c context.Context) error { return store.Advance(c, key) }) != OK {
			return
		}
	}
	w.maybePause(pauseAt, 1)

	get, ok := w.read(k, store)
	if !ok {
		return // nothing to increment; a failed read changed nothing
	}

	w.maybePause(pauseAt, 2)
	if cfg.Work > 0 {
		time.Sleep(time.Duration(w.rng.Int64N(int64(cfg.Work))))
	}

	w.increment(k, token, store, get)
}

// read reads key k through the lease's writer and records the read; ok is
// false when the read failed (which changed nothing).
func (w *worker) read(k int, store *lock.Writer) (Op, bool) {
	cfg := &w.r.cfg
	call := w.r.now()
	octx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
	rec, err := store.Get(octx, cfg.key(k))
	cancel()
	get, ok, _ := getOp(rec, err)
	if !ok {
		return Op{}, false
	}
	get.Key, get.Call, get.Return = k, call, w.r.now()
	get.FenceOK = get.FenceOK && !cfg.Unfenced
	w.record(get)
	return get, true
}

// increment writes the value get read plus one to key k, fenced with token
// through the lease's writer (or plain, when the run is unfenced).
func (w *worker) increment(k int, token int64, store *lock.Writer, get Op) {
	cfg := &w.r.cfg
	key := cfg.key(k)
	next, id := get.Value+1, w.r.newID()
	value := encodeValue(next, id)
	put := func(c context.Context) error { return store.Put(c, key, value) }
	if cfg.Unfenced {
		put = func(c context.Context) error { return cfg.Store.Put(c, key, unfencedToken, value) }
	}
	w.write(Put, k, token, next, id, put)
}

// write runs a Put or an Advance, repeating it (same token, same value)
// while its outcome is unknown, and records every attempt. It returns the
// last outcome.
func (w *worker) write(kind Kind, k int, token, value, id int64, do func(context.Context) error) Outcome {
	return w.writeOp(Op{Kind: kind, Key: k, Token: token, Value: value, ID: id}, do)
}

// writeOp is write for an operation o that carries more (a transfer's
// half): o's Outcome, Call and Return are filled in for each attempt.
func (w *worker) writeOp(o Op, do func(context.Context) error) Outcome {
	cfg := &w.r.cfg
	var out Outcome
	for attempt := 0; attempt <= maxRetries; attempt++ {
		call := w.r.now()
		octx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
		err := do(octx)
		cancel()
		ret := w.r.now()
		switch {
		case err == nil:
			out = OK
		case errors.Is(err, fence.ErrStale):
			out = Stale
		default:
			out = Unknown
			ret += int64(cfg.ambiguity())
		}
		o.Outcome, o.Call, o.Return = out, call, ret
		w.record(o)
		if out != Unknown {
			return out
		}
	}
	return out
}

// maybePause freezes the worker at step `at` for 1.2 to 2.5 TTLs, so that its
// lease expires under it.
func (w *worker) maybePause(at, step int) {
	if at != step || !w.r.faulting() {
		return
	}
	w.r.count(&w.r.pauses)
	d := time.Duration(float64(w.r.cfg.TTL) * (1.2 + 1.3*w.rng.Float64()))
	time.Sleep(d)
}

func (w *worker) record(o Op) {
	o.Worker = w.id
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, o)
}

// attemptKey is the context key under which a worker's Acquire (or
// DoMulti) tells the backend which worker it is for (a *worker).
type attemptKey struct{}

// byKind splits a history by key (or lock) for the operations of the given
// kinds, each part sorted by call time.
func byKind(hist []Op, keys int, kinds ...Kind) [][]Op {
	parts := make([][]Op, keys)
	for _, o := range hist {
		if slices.Contains(kinds, o.Kind) {
			parts[o.Key] = append(parts[o.Key], o)
		}
	}
	for _, p := range parts {
		slices.SortStableFunc(p, func(a, b Op) int { return cmp64(a.Call, b.Call) })
	}
	return parts
}
