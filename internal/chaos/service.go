package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// wait is one stretch of a worker waiting for a lease or a permit: from the
// first attempt since its last grant until an Acquire (or Do) returned.
type wait struct {
	from, to int64
	granted  bool
}

// startWait notes that the worker asks for a lease; a wait goes on across
// failed attempts until one is granted.
func (w *worker) startWait() {
	if w.waitFrom < 0 {
		w.waitFrom = w.r.now()
	}
}

// endWait notes that an Acquire returned, granted or not.
func (w *worker) endWait(granted bool) {
	if w.r.cfg.phase == nil {
		return
	}
	w.mu.Lock()
	w.waits = append(w.waits, wait{from: w.waitFrom, to: w.r.now(), granted: granted})
	w.mu.Unlock()
	if granted {
		w.waitFrom = -1
	}
}

// Service is how long a shape's workers waited once the faults of a
// contention run had cleared.
type Service struct {
	Bound   time.Duration
	Cleared time.Duration // when the last fault had ended, from the start of the run
	Window  time.Duration // from then to the end of the run
	Waits   int           // waits that went on after the faults cleared
	Longest time.Duration // the longest of them, counted from when the faults cleared at the earliest
	Over    int           // waits longer than Bound (must be 0)
	// Unserved counts workers handed nothing after the faults cleared,
	// though the window was longer than the bound (must be 0).
	Unserved int
	First    string // the first wait over the bound, in words
}

// service measures the workers' waits after the faults cleared. A wait
// that began before then counts from then: the faults are what it waited
// out before.
func (r *runner) service(workers []*worker, end int64) *Service {
	ph := r.cfg.phase
	cleared := int64(ph.clearedAt().Sub(r.start))
	s := &Service{Bound: ph.bound, Cleared: time.Duration(cleared), Window: time.Duration(end - cleared)}
	for _, w := range workers {
		served := false
		w.mu.Lock()
		waits := w.waits
		w.mu.Unlock()
		for _, wt := range waits {
			to := min(wt.to, end)
			if to <= cleared {
				continue
			}
			from := max(wt.from, cleared)
			d := time.Duration(to - from)
			s.Waits++
			if d > s.Longest {
				s.Longest = d
			}
			if d > s.Bound {
				if s.Over == 0 {
					s.First = fmt.Sprintf("worker %d waited %v from %v (granted: %v)", w.id, d.Round(time.Millisecond), time.Duration(from).Round(time.Millisecond), wt.granted)
				}
				s.Over++
			}
			served = served || wt.granted
		}
		if !served && s.Window > s.Bound {
			s.Unserved++
		}
	}
	return s
}

func (s *Service) violations() []string {
	var v []string
	if s.Window <= s.Bound {
		v = append(v, fmt.Sprintf("service unchecked: the faults cleared %v before the end, not more than the bound %v", s.Window.Round(time.Millisecond), s.Bound))
	}
	if s.Over > 0 {
		v = append(v, fmt.Sprintf("%d waits after the faults cleared longer than the bound %v: %s", s.Over, s.Bound, s.First))
	}
	if s.Unserved > 0 {
		v = append(v, fmt.Sprintf("%d workers served nothing in the %v after the faults cleared", s.Unserved, s.Window.Round(time.Millisecond)))
	}
	return v
}

// Print writes the service figures for people.
func (s *Service) Print(w io.Writer) {
	fmt.Fprintf(w, "service after the faults cleared at %v: %d waits in %v, longest %v (bound %v), %d over, %d workers unserved\n",
		s.Cleared.Round(time.Millisecond), s.Waits, s.Window.Round(time.Millisecond), s.Longest.Round(time.Millisecond), s.Bound, s.Over, s.Unserved)
}

// errKilled is what a killed waiter's backend answers: its process is gone.
var errKilled = errors.New("chaos: the waiter's process was killed")

// killable is the backend of a waiter that may be killed in line: once
// killed, it refuses every call, as a dead process's connection would,
// so nothing the Client does afterwards (leaving the line, releasing)
// reaches the server.
type killable struct {
	driver.Backend
	dead atomic.Bool
}

func (k *killable) kill() { k.dead.Store(true) }

func (k *killable) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if k.dead.Load() {
		return driver.Grant{}, errKilled
	}
	return k.Backend.Acquire(ctx, req)
}

func (k *killable) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Backend.Extend(ctx, c, ttl)
}

func (k *killable) Release(ctx context.Context, c driver.Claim) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Backend.Release(ctx, c)
}

func (k *killable) Await(ctx context.Context, c driver.Claim, d time.Duration) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Backend.Await(ctx, c, d)
}

func (k *killable) Leave(ctx context.Context, c driver.Claim) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Backend.Leave(ctx, c)
}

// waitFault decides, while faults may start, whether this cycle's wait is
// cut short: given up by its caller after 0.1 to 1 TTL (the context ends,
// and the Client leaves the line), or killed in line after as long (a
// Client whose backend dies, see killable). It returns the Client and the
// context to wait with, granted, which the cycle calls once it is handed
// its lease and which reports false when the waiter was killed as the
// grant came (the lease is then left to expire, as a dead process's
// would), and done, which the cycle defers.
func (w *worker) waitFault(ctx context.Context) (client *lock.Client, actx context.Context, granted func() bool, done func()) {
	r := w.r
	cfg := &r.cfg
	alive := func() bool { return true }
	if cfg.CancelChance <= 0 && cfg.KillChance <= 0 || !r.faulting() {
		return r.client, ctx, alive, func() {}
	}
	p := w.rng.Float64()
	switch {
	case cfg.CancelChance > 0 && w.owesFault(1, &r.cancels):
		p = 0
	case cfg.KillChance > 0 && w.owesFault(2, &r.kills):
		p = max(cfg.CancelChance, 0)
	}
	after := time.Duration(float64(cfg.TTL) * (0.1 + 0.9*w.rng.Float64()))
	switch {
	case cfg.CancelChance > 0 && p < cfg.CancelChance:
		actx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(after, func() { r.count(&r.cancels); cancel() })
		return r.client, actx, func() bool { t.Stop(); return true }, func() { t.Stop(); cancel() }
	case cfg.KillChance > 0 && p < max(cfg.CancelChance, 0)+cfg.KillChance:
		kb := &killable{Backend: r.backend}
		opts := cfg.clientOptions()
		actx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(after, func() { r.count(&r.kills); kb.kill(); cancel() })
		return lock.New(kb, &opts), actx, t.Stop, func() { t.Stop(); cancel() }
	}
	return r.client, ctx, alive, func() {}
}

// owesFault reports whether the worker numbered id (any worker, for
// anyWorker) must make a fault whose count is n because the run has made
// none yet: in a contention run, so that a short run on a slow backend,
// with few cycles, still has a pause (the first worker to hold anything),
// a wait given up (worker 1) and a waiter killed in line (worker 2),
// whatever its chances drew. A worker keeps trying until one takes effect
// (a wait ends before it is given up when the worker is first in line).
func (w *worker) owesFault(id int, n *int) bool {
	if w.r.cfg.phase == nil || (id != anyWorker && w.id != id) || !w.r.faulting() {
		return false
	}
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return *n == 0
}

// anyWorker is owesFault's id for a fault any worker may owe.
const anyWorker = -1
