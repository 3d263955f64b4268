package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Shape is the lock shape a permit run (RunPermits) exercises.
type Shape string

// The shapes of a PermitBackend.
const (
	// ShapeRW: one read-write lock per key. Writers increment the key
	// under the write permit (Advance, Get, fenced Put); readers read it
	// under a read permit and note its fence against their PriorWriter.
	ShapeRW Shape = "rw"
	// ShapeSemaphore: one semaphore of Permits permits; each holder
	// increments a key of its choice under its permit's token.
	ShapeSemaphore Shape = "semaphore"
)

// PermitConfig describes a run on the shapes of a lock.PermitBackend: the
// workers, faults and fenced increments of Run, with semaphore permits or
// read-write permits instead of a lock. Config.Backend must be a
// lock.PermitBackend.
type PermitConfig struct {
	Config
	Shape Shape
	// Permits is the semaphore's number of permits; default 2.
	Permits int
	// ReadChance is the probability that a cycle of an RW run reads
	// rather than writes; default 0.5, negative for none.
	ReadChance float64
	// InspectEvery is how often a sampler asks the backend for the live
	// permits of every name (InspectPermits); default TTL/3.
	InspectEvery time.Duration
	// ServerForgets says that the permit server may lose every permit and
	// its last writer (killed and restarted without persistence). A
	// holder's permit may then be granted again while the holder's lease
	// has time left, and a grant's PriorWriter may miss the writers before
	// the restart: the checks that rely on the server remembering
	// (exclusion, samples, live reads, prior writers) are then figures,
	// not violations. The counter checks and the token checks still hold.
	ServerForgets bool
}

func (pc *PermitConfig) setDefaults() error {
	if err := pc.Config.setDefaults(); err != nil {
		return err
	}
	if _, ok := pc.Backend.(lock.PermitBackend); !ok {
		return fmt.Errorf("%w: chaos: %T is not a lock.PermitBackend", lock.ErrUnsupported, pc.Backend)
	}
	switch pc.Shape {
	case ShapeRW, ShapeSemaphore:
	default:
		return fence.Invalid("chaos: unknown shape %q (want %q or %q)", pc.Shape, ShapeRW, ShapeSemaphore)
	}
	if pc.Permits == 0 {
		pc.Permits = 2
	}
	if pc.Permits < 1 || pc.Permits > lock.MaxPermits {
		return fence.Invalid("chaos: %d permits is outside 1 to %d", pc.Permits, lock.MaxPermits)
	}
	if pc.ReadChance == 0 {
		pc.ReadChance = 0.5
	}
	if pc.InspectEvery <= 0 {
		pc.InspectEvery = pc.TTL / 3
	}
	return nil
}

// names are the permit names of the run, one per key for ShapeRW, one for
// ShapeSemaphore.
func (pc *PermitConfig) names() []string {
	if pc.Shape == ShapeSemaphore {
		return []string{pc.Prefix + "sem"}
	}
	names := make([]string, pc.Keys)
	for k := range names {
		names[k] = fmt.Sprintf("%srw-%d", pc.Prefix, k)
	}
	return names
}

// RunPermits is Run for a semaphore or a read-write lock: workers increment
// shared counters under their permits (and, for ShapeRW, read them under
// read permits) while they are paused past the TTL and the network fails,
// then the history is checked: the counter checks of Run (no stale write
// accepted, no increment lost, the fenced-register model) and the shape's
// own (PermitReport). It returns an error only when the run could not be
// carried out.
func RunPermits(ctx context.Context, pc PermitConfig) (*PermitReport, error) {
	if err := pc.setDefaults(); err != nil {
		return nil, err
	}
	r := newRunner(pc.Config)
	p := &permitRun{r: r, pc: pc, pb: pc.Backend.(lock.PermitBackend), pending: map[string]int64{}, inside: map[string]*holding{}}
	opts := pc.clientOptions()
	r.client = lock.New(permitRecording{Backend: pc.Backend, pb: p.pb, p: p}, &opts)
	d, err := r.drive(ctx, p.loop, p.sample)
	if err != nil {
		return nil, err
	}
	rep := p.check(d.hist, d.final)
	rep.Elapsed = d.elapsed
	return rep, nil
}

// permitRun is the state of a permit run besides the runner's.
type permitRun struct {
	r  *runner
	pc PermitConfig
	pb lock.PermitBackend

	mu      sync.Mutex
	pending map[string]int64 // owner -> call of its earliest attempt that may have minted a token
	grants  []grant
	reads   []readObs
	spans   []liveSpan
	inside  map[string]*holding // name -> workers that believe they hold a permit on it
	// what the workers believed and the sampler saw
	believedMax, overlaps                          int
	inspections, inspectFailures, inspectBad       int
	inspectExample                                 string
	readGrants, writeGrants, semGrants, notGranted int
}

// holding counts the workers inside a name's Do, by kind.
type holding struct{ readers, writers, sem int }

// grant is one AcquirePermit that returned a permit. Call is the call of
// the owner's earliest attempt since its last definite refusal: an attempt
// whose reply was lost may have minted the token that a later attempt of
// the same owner returns.
type grant struct {
	Name         string
	Owner        string
	Kind         lock.PermitKind
	Token, Prior int64
	Call, Return int64
}

// readObs is what a reader saw: the fence of the key under its read
// permit, and whether its lease was still live (Lease.Err nil) after the
// read returned.
type readObs struct {
	Worker, Key  int
	Token, Prior int64
	Fence        int64
	Live         bool
	Call, Return int64
}

// liveSpan is a time during which a permit was certainly live on the
// server: from the start of the worker's function (after the grant
// returned) to the last moment at which Lease.Err said nil, read before Err
// looked at its deadline. Nothing else of the permit's life is assumed.
type liveSpan struct {
	Name       string
	Kind       lock.PermitKind
	Worker     int
	Token      int64
	Start, End int64
	live       bool
}

// check notes that the lease is live now, if Err says so.
func (s *liveSpan) check(r *runner, l *lock.Lease) {
	t := r.now()
	if l.Err() == nil {
		s.End, s.live = t, true
	}
}

func (p *permitRun) loop(ctx context.Context, w *worker) {
	for ctx.Err() == nil {
		k := w.rng.IntN(p.pc.Keys)
		switch {
		case p.pc.Shape == ShapeSemaphore:
			p.cycle(ctx, w, k, lock.SemaphorePermit)
		case p.pc.ReadChance > 0 && w.rng.Float64() < p.pc.ReadChance:
			p.cycle(ctx, w, k, lock.ReadPermit)
		default:
			p.cycle(ctx, w, k, lock.WritePermit)
		}
	}
}

// cycle takes a permit of kind, without keep-alive so that a pause loses
// it, and increments key k (or reads it, for a ReadPermit) under it.
func (p *permitRun) cycle(ctx context.Context, w *worker, k int, kind lock.PermitKind) {
	r, pc := p.r, &p.pc
	name := pc.names()[0]
	if pc.Shape == ShapeRW {
		name = pc.names()[k]
	}
	ran := false
	fn := func(_ context.Context, l *lock.Lease) error {
		ran = true
		r.count(&r.acquisitions)
		span := liveSpan{Name: name, Kind: kind, Worker: w.id, Token: int64(l.Token()), Start: r.now()}
		span.check(r, l)
		p.enter(name, kind)
		defer p.leave(name, kind)
		if kind == lock.ReadPermit {
			p.read(w, k, l, &span)
		} else {
			p.increment(w, k, l, &span)
		}
		if span.live {
			p.mu.Lock()
			p.spans = append(p.spans, span)
			p.mu.Unlock()
		}
		return nil
	}
	var err error
	opt := lock.WithKeepAlive(false)
	switch kind {
	case lock.SemaphorePermit:
		err = r.client.Semaphore(name, pc.Permits).Do(ctx, pc.TTL, fn, opt)
	case lock.ReadPermit:
		err = r.client.RWLock(name).DoRead(ctx, pc.TTL, fn, opt)
	default:
		err = r.client.RWLock(name).DoWrite(ctx, pc.TTL, fn, opt)
	}
	if err != nil && !ran && ctx.Err() == nil {
		r.count(&r.acquireFailures)
	}
}

// enter records that a worker believes it holds a permit of kind on name,
// counting an overlap when the shape forbids it (a zombie holder, paused
// past its TTL, still believes it holds one).
func (p *permitRun) enter(name string, kind lock.PermitKind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.inside[name]
	if h == nil {
		h = &holding{}
		p.inside[name] = h
	}
	switch kind {
	case lock.SemaphorePermit:
		if h.sem >= p.pc.Permits {
			p.overlaps++
		}
		h.sem++
	case lock.ReadPermit:
		if h.writers > 0 {
			p.overlaps++
		}
		h.readers++
	case lock.WritePermit:
		if h.writers+h.readers > 0 {
			p.overlaps++
		}
		h.writers++
	}
	p.believedMax = max(p.believedMax, h.sem+h.readers+h.writers)
}

func (p *permitRun) leave(name string, kind lock.PermitKind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.inside[name]
	switch kind {
	case lock.SemaphorePermit:
		h.sem--
	case lock.ReadPermit:
		h.readers--
	case lock.WritePermit:
		h.writers--
	}
}

// increment is the fenced read-modify-write of Run's cycle under a permit:
// Advance, Get, Put of the value plus one, all with the permit's token,
// pausing past the TTL at a random step now and then.
func (p *permitRun) increment(w *worker, k int, l *lock.Lease, span *liveSpan) {
	r, cfg := p.r, &p.r.cfg
	pauseAt := -1
	if cfg.PauseChance > 0 && w.rng.Float64() < cfg.PauseChance {
		pauseAt = w.rng.IntN(3)
	}
	token := int64(l.Token())
	key := cfg.key(k)
	store := l.Fenced(cfg.Store)

	w.maybePause(pauseAt, 0)
	if !cfg.Unfenced {
		if w.write(Advance, k, token, 0, 0, func(c context.Context) error { return store.Advance(c, key) }) != OK {
			return
		}
	}
	span.check(r, l)
	w.maybePause(pauseAt, 1)

	call := r.now()
	octx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
	rec, err := store.Get(octx, key)
	cancel()
	get, ok, _ := getOp(rec, err)
	if !ok {
		return
	}
	get.Key, get.Call, get.Return = k, call, r.now()
	get.FenceOK = get.FenceOK && !cfg.Unfenced
	w.record(get)
	span.check(r, l)

	w.maybePause(pauseAt, 2)
	if cfg.Work > 0 {
		time.Sleep(time.Duration(w.rng.Int64N(int64(cfg.Work))))
	}
	next, id := get.Value+1, r.newID()
	value := encodeValue(next, id)
	put := func(c context.Context) error { return store.Put(c, key, value) }
	if cfg.Unfenced {
		put = func(c context.Context) error { return cfg.Store.Put(c, key, unfencedToken, value) }
	}
	w.write(Put, k, token, next, id, put)
	span.check(r, l)
}

// read reads key k under a read permit and notes its fence, the permit's
// PriorWriter, and whether the lease was still live once the read had
// returned.
func (p *permitRun) read(w *worker, k int, l *lock.Lease, span *liveSpan) {
	r, cfg := p.r, &p.r.cfg
	pauseAt := -1
	if cfg.PauseChance > 0 && w.rng.Float64() < cfg.PauseChance {
		pauseAt = w.rng.IntN(2)
	}
	w.maybePause(pauseAt, 0)
	call := r.now()
	octx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
	rec, err := cfg.Store.Get(octx, cfg.key(k))
	cancel()
	get, ok, _ := getOp(rec, err)
	if !ok {
		return
	}
	get.Key, get.Call, get.Return = k, call, r.now()
	get.FenceOK = get.FenceOK && !cfg.Unfenced
	w.record(get)
	w.maybePause(pauseAt, 1)
	// The check comes after the read returned: nil means the permit was
	// live on the server over the whole read.
	span.check(r, l)
	obs := readObs{Worker: w.id, Key: k, Token: int64(l.Token()), Prior: int64(l.PriorWriter()),
		Fence: get.Fence, Live: span.live && span.End >= get.Return, Call: get.Call, Return: get.Return}
	p.mu.Lock()
	p.reads = append(p.reads, obs)
	p.mu.Unlock()
	if cfg.Work > 0 {
		time.Sleep(time.Duration(w.rng.Int64N(int64(cfg.Work))))
	}
	span.check(r, l)
}

// sample asks the backend for the live permits of every name until ctx
// ends, and counts the answers that break the shape: more than Permits
// semaphore permits, or a writer with anyone else.
func (p *permitRun) sample(ctx context.Context) {
	names := p.pc.names()
	for sleep(ctx, p.pc.InspectEvery) {
		for _, name := range names {
			octx, cancel := context.WithTimeout(ctx, p.pc.OpTimeout)
			ps, err := p.pb.InspectPermits(octx, name)
			cancel()
			p.mu.Lock()
			p.inspections++
			if err != nil {
				p.inspectFailures++
			} else if bad := p.shapeBroken(ps); bad != "" {
				p.inspectBad++
				if p.inspectExample == "" {
					p.inspectExample = bad
				}
			}
			p.mu.Unlock()
		}
	}
}

// shapeBroken describes what in ps the shape forbids, or returns "".
func (p *permitRun) shapeBroken(ps lock.Permits) string {
	kinds := map[lock.PermitKind]int{}
	for _, h := range ps.Holders {
		kinds[h.Kind]++
	}
	n := len(ps.Holders)
	switch {
	case p.pc.Shape == ShapeSemaphore && (n > p.pc.Permits || kinds[lock.SemaphorePermit] != n):
		return fmt.Sprintf("%s has %d live permits (%d semaphore permits); the semaphore has %d", ps.Name, n, kinds[lock.SemaphorePermit], p.pc.Permits)
	case p.pc.Shape == ShapeRW && kinds[lock.WritePermit] > 0 && n > 1:
		return fmt.Sprintf("%s has a live write permit among %d live permits (%d writers)", ps.Name, n, kinds[lock.WritePermit])
	}
	return ""
}
