package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Shape is the lock shape a permit run (RunPermits) exercises.
type Shape string

// The permit shapes a run can exercise.
const (
	// ShapeRW: one read-write lock per key. Writers increment the key
	// under the write permit (Advance, Get, fenced Put); readers read it
	// under a read permit, first advancing it to their ReadFence, and note
	// its fence against that ReadFence.
	ShapeRW Shape = "rw"
	// ShapeSemaphore: one semaphore of Permits permits; each holder
	// increments a key of its choice under its permit's token.
	ShapeSemaphore Shape = "semaphore"
)

// PermitConfig describes a run on the permit shapes: the workers, faults
// and fenced increments of Run, with semaphore permits or read-write
// permits instead of a lock.
type PermitConfig struct {
	Config
	Shape Shape
	// Permits is the semaphore's number of permits; default 2.
	Permits int
	// ReadChance is the probability that a cycle of an RW run reads
	// rather than writes; default 0.5, negative for none.
	ReadChance float64
	// InspectEvery is how often a sampler asks the backend for the live
	// permits of every name (Inspect); default TTL/3.
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
	switch pc.Shape {
	case ShapeRW, ShapeSemaphore:
	default:
		return fence.Invalid("chaos: unknown shape %q (want %q or %q)", pc.Shape, ShapeRW, ShapeSemaphore)
	}
	if pc.Permits == 0 {
		pc.Permits = 2
	}
	if pc.Permits < 1 || pc.Permits > driver.MaxPermits {
		return fence.Invalid("chaos: %d permits is outside 1 to %d", pc.Permits, driver.MaxPermits)
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
// carried out: among others, when the backend answers driver.ErrUnsupported
// for the shape.
func RunPermits(ctx context.Context, pc PermitConfig) (*PermitReport, error) {
	if err := pc.setDefaults(); err != nil {
		return nil, err
	}
	r := newRunner(pc.Config)
	p := &permitRun{r: r, pc: pc, pending: map[string]int64{}, inside: map[string]*holding{}}
	opts := pc.clientOptions()
	r.backend = permitRecording{Backend: pc.Backend, p: p}
	r.client = lock.New(r.backend, &opts)
	d, err := r.drive(ctx, p.loop, p.sample)
	if err != nil {
		return nil, err
	}
	rep := p.check(d.hist, d.final)
	rep.Elapsed = d.elapsed
	rep.Service = d.service
	return rep, nil
}

// permitRun is the state of a permit run besides the runner's.
type permitRun struct {
	r  *runner
	pc PermitConfig

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

// grant is one Acquire of a permit that returned one. Call is the call of
// the owner's earliest attempt since its last definite refusal: an attempt
// whose reply was lost may have minted the token that a later attempt of
// the same owner returns.
type grant struct {
	Name         string
	Owner        string
	Kind         driver.Kind
	Token, Prior int64
	Call, Return int64
}

// readObs is what a reader saw: the fence of the key under its read
// permit, and whether its lease was still live (Lease.Err nil) after the
// read returned.
type readObs struct {
	Worker, Key      int
	Token, ReadFence int64
	Fence            int64
	Live             bool
	Call, Return     int64
}

// note keeps what a reader saw.
func (p *permitRun) note(o readObs) {
	p.mu.Lock()
	p.reads = append(p.reads, o)
	p.mu.Unlock()
}

// liveSpan is a time during which a permit was certainly live on the
// server: from the start of the worker's function (after the grant
// returned) to the last moment at which Lease.Err said nil, read before Err
// looked at its deadline. Nothing else of the permit's life is assumed.
type liveSpan struct {
	Name       string
	Kind       driver.Kind
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
			p.cycle(ctx, w, k, driver.Semaphore)
		case p.pc.ReadChance > 0 && w.rng.Float64() < p.pc.ReadChance:
			p.cycle(ctx, w, k, driver.Read)
		default:
			p.cycle(ctx, w, k, driver.Write)
		}
	}
}

// cycle takes a permit of kind, without keep-alive so that a pause loses
// it, and increments key k (or reads it, for a Read permit) under it.
func (p *permitRun) cycle(ctx context.Context, w *worker, k int, kind driver.Kind) {
	r, pc := p.r, &p.pc
	name := pc.names()[0]
	if pc.Shape == ShapeRW {
		name = pc.names()[k]
	}
	client, actx, granted, done := w.waitFault(ctx)
	defer done()
	w.startWait()
	ran := false
	fn := func(_ context.Context, l *lock.Lease) error {
		ran = true
		w.endWait(true)
		if !granted() {
			return nil // killed as the grant came: the permit is left to expire
		}
		r.count(&r.acquisitions)
		span := liveSpan{Name: name, Kind: kind, Worker: w.id, Token: int64(l.Token()), Start: r.now()}
		span.check(r, l)
		p.enter(name, kind)
		defer p.leave(name, kind)
		if kind == driver.Read {
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
	case driver.Semaphore:
		err = client.Semaphore(name, pc.Permits).Do(actx, pc.TTL, fn, opt)
	case driver.Read:
		err = client.RWLock(name).DoRead(actx, pc.TTL, fn, opt)
	default:
		err = client.RWLock(name).DoWrite(actx, pc.TTL, fn, opt)
	}
	if err != nil && !ran {
		w.endWait(false)
		r.failed(actx, err)
	}
}

// enter records that a worker believes it holds a permit of kind on name,
// counting an overlap when the shape forbids it (a zombie holder, paused
// past its TTL, still believes it holds one).
func (p *permitRun) enter(name string, kind driver.Kind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.inside[name]
	if h == nil {
		h = &holding{}
		p.inside[name] = h
	}
	switch kind {
	case driver.Semaphore:
		if h.sem >= p.pc.Permits {
			p.overlaps++
		}
		h.sem++
	case driver.Read:
		if h.writers > 0 {
			p.overlaps++
		}
		h.readers++
	case driver.Write:
		if h.writers+h.readers > 0 {
			p.overlaps++
		}
		h.writers++
	}
	p.believedMax = max(p.believedMax, h.sem+h.readers+h.writers)
}

func (p *permitRun) leave(name string, kind driver.Kind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.inside[name]
	switch kind {
	case driver.Semaphore:
		h.sem--
	case driver.Read:
		h.readers--
	case driver.Write:
		h.writers--
	}
}

// increment is the fenced read-modify-write of Run's cycle under a permit:
// Advance, Get, Put of the value plus one, all with the permit's token,
// pausing past the TTL at a random step now and then.
func (p *permitRun) increment(w *worker, k int, l *lock.Lease, span *liveSpan) {
	r, cfg := p.r, &p.r.cfg
	pauseAt := -1
	if cfg.PauseChance > 0 && (w.rng.Float64() < cfg.PauseChance || w.owesFault(anyWorker, &p.r.pauses)) {
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
// ReadFence, and whether the lease was still live once the read had
// returned. Fenced, it first advances the key to the permit's ReadFence, as
// docs/patterns.md tells a reader to, so that no writer granted before the
// reader can change the key under it; an Advance refused as stale is noted
// with the fence it met, which is above the ReadFence.
func (p *permitRun) read(w *worker, k int, l *lock.Lease, span *liveSpan) {
	r, cfg := p.r, &p.r.cfg
	pauseAt := -1
	if cfg.PauseChance > 0 && (w.rng.Float64() < cfg.PauseChance || w.owesFault(anyWorker, &p.r.pauses)) {
		pauseAt = w.rng.IntN(3)
	}
	readFence := int64(l.ReadFence())
	// A pause before the Advance is the reader whose permit expires
	// before it has fenced the key: a writer may get in meanwhile, and
	// the Advance must then be refused.
	w.maybePause(pauseAt, 0)
	if !cfg.Unfenced {
		var met int64
		call := r.now()
		out := w.write(Advance, k, readFence, 0, 0, func(c context.Context) error {
			err := l.Fenced(cfg.Store).Advance(c, cfg.key(k))
			if se := (*fence.StaleError)(nil); errors.As(err, &se) {
				met = int64(se.Fence)
			}
			return err
		})
		if out == Stale {
			ret := r.now()
			span.check(r, l)
			p.note(readObs{Worker: w.id, Key: k, Token: int64(l.Token()), ReadFence: readFence,
				Fence: met, Live: span.live && span.End >= ret, Call: call, Return: ret})
		}
		if out != OK {
			return
		}
	}
	w.maybePause(pauseAt, 1)
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
	w.maybePause(pauseAt, 2)
	// The check comes after the read returned: nil means the permit was
	// live on the server over the whole read.
	span.check(r, l)
	p.note(readObs{Worker: w.id, Key: k, Token: int64(l.Token()), ReadFence: readFence,
		Fence: get.Fence, Live: span.live && span.End >= get.Return, Call: get.Call, Return: get.Return})
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
	kind := driver.Write // any permit kind names the permit name
	if p.pc.Shape == ShapeSemaphore {
		kind = driver.Semaphore
	}
	for sleep(ctx, p.pc.InspectEvery) {
		for _, name := range names {
			octx, cancel := context.WithTimeout(ctx, p.pc.OpTimeout)
			info, err := p.pc.Backend.Inspect(octx, name, kind)
			cancel()
			p.mu.Lock()
			p.inspections++
			if err != nil {
				p.inspectFailures++
			} else if bad := p.shapeBroken(name, info); bad != "" {
				p.inspectBad++
				if p.inspectExample == "" {
					p.inspectExample = bad
				}
			}
			p.mu.Unlock()
		}
	}
}

// shapeBroken describes what in info, the live permits of name, the shape
// forbids, or returns "".
func (p *permitRun) shapeBroken(name string, info driver.Info) string {
	kinds := map[driver.Kind]int{}
	for _, h := range info.Holders {
		kinds[h.Kind]++
	}
	n := len(info.Holders)
	switch {
	case p.pc.Shape == ShapeSemaphore && (n > p.pc.Permits || kinds[driver.Semaphore] != n):
		return fmt.Sprintf("%s has %d live permits (%d semaphore permits); the semaphore has %d", name, n, kinds[driver.Semaphore], p.pc.Permits)
	case p.pc.Shape == ShapeRW && kinds[driver.Write] > 0 && n > 1:
		return fmt.Sprintf("%s has a live write permit among %d live permits (%d writers)", name, n, kinds[driver.Write])
	}
	return ""
}
