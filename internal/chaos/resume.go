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

// RunResume is Run for leases that outlive their process: each cycle
// acquires a key's lock, increments the key once (Advance, Get, fenced
// Put), then "restarts": it drops its *lock.Lease without releasing it, and
// a new lock.Client (another process, knowing only the saved owner) adopts
// the lease with Client.Resume and increments the key once more through the
// resumed lease, with the same token. Pauses past the TTL still freeze
// workers, at one of five steps: before the Advance, before the first Get,
// between either Get and its Put, and in the restart itself. Some Resume
// calls then find the lease lapsed (and maybe taken by another worker) and
// must fail with lock.ErrNotHeld.
//
// On top of Run's checks (no stale write accepted, no increment lost, the
// fenced-register and token models, two live holders) the history of the
// resumes is checked (ResumeReport): a resumed lease has the token of the
// lease it adopted, that is the latest token granted to its owner, and no
// Resume succeeds after another owner was granted the name. It returns an
// error only when the run could not be carried out. Sets and Transfer are
// refused: a resume adopts one name's lease.
func RunResume(ctx context.Context, cfg Config) (*ResumeReport, error) {
	if cfg.Sets || cfg.Transfer {
		return nil, fence.Invalid("chaos: a resume run takes one lock per cycle: no Sets or Transfer")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	r := newRunner(cfg)
	rec := recordingBackend{Backend: cfg.Backend, r: r}
	// A restarted process's Client runs on the recording backend too: its
	// resume (an Acquire with Resume) mints no token and is not recorded
	// as a grant, its releases are.
	rr := &resumeRun{r: r, backend: rec, opts: cfg.clientOptions()}
	r.client = lock.New(rec, &rr.opts)
	d, err := r.drive(ctx, func(ctx context.Context, w *worker) {
		for ctx.Err() == nil {
			rr.cycle(ctx, w, w.rng.IntN(cfg.Keys))
		}
	})
	if err != nil {
		return nil, err
	}
	rep := rr.check(d.hist, d.final)
	rep.Elapsed = d.elapsed
	rep.progress(d.held, d.end, cfg.StallLimit)
	return rep, nil
}

// resumeRun is the state of a resume run besides the runner's.
type resumeRun struct {
	r       *runner
	backend driver.Backend // what a restarted process's Client runs on
	opts    lock.Options

	mu      sync.Mutex
	resumes []resumeObs
}

// resumeObs is one Client.Resume call of a restarted process: the lease it
// was asked to adopt and what it got, with the whole call's window.
type resumeObs struct {
	Worker, Key  int
	Owner        string
	Adopted      int64 // the token of the lease the first process dropped
	Token        int64 // the resumed lease's token (0 when the call failed)
	Err          error
	Call, Return int64
	// Began is when the first process's Acquire call began: the lease
	// began no earlier, so it was certainly live until a TTL later.
	Began int64
}

func (o resumeObs) String() string {
	return fmt.Sprintf("w%d resume(lock %d, owner %.8s, adopting token %d) -> token %d [%d, %d]",
		o.Worker, o.Key, o.Owner, o.Adopted, o.Token, o.Call, o.Return)
}

// cycle acquires key k's lock, increments the key, drops the lease as a
// process that dies would, and lets a new Client resume the lease by its
// owner and increment the key again with the same token.
func (rr *resumeRun) cycle(ctx context.Context, w *worker, k int) {
	r, cfg := rr.r, &rr.r.cfg
	name := cfg.lockName(k)
	began := r.now()
	lease, err := r.client.Acquire(context.WithValue(ctx, attemptKey{}, w), name, cfg.TTL)
	if err != nil {
		r.failed(ctx, err)
		return
	}
	w.acquired()
	r.enter(k)
	defer r.leave(k)

	pauseAt := -1
	if cfg.PauseChance > 0 && w.rng.Float64() < cfg.PauseChance {
		pauseAt = w.rng.IntN(5) // step 3 is the restart itself
	}
	if !rr.firstHalf(w, k, lease, pauseAt) {
		release(cfg, lease)
		return
	}

	// The restart: the lease is dropped unreleased (nothing below uses
	// it); the new process knows only the name and the owner it saved.
	owner, adopted := lease.Owner(), int64(lease.Token())
	w.maybePause(pauseAt, 3)
	restarted := lock.New(rr.backend, &rr.opts)
	obs := resumeObs{Worker: w.id, Key: k, Owner: owner, Adopted: adopted, Began: began, Call: r.now()}
	// Not the run's context: a restart begun is carried out, so that the
	// end of the run does not count as a failed resume.
	octx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
	resumed, err := restarted.Resume(octx, name, owner, cfg.TTL)
	cancel()
	obs.Return, obs.Err = r.now(), err
	if errors.Is(err, driver.ErrUnsupported) {
		r.failed(ctx, err) // a backend that cannot resume: the run ends
		return
	}
	if err == nil {
		obs.Token = int64(resumed.Token())
	}
	rr.mu.Lock()
	rr.resumes = append(rr.resumes, obs)
	rr.mu.Unlock()
	if err != nil {
		return
	}
	defer release(cfg, resumed)

	store := resumed.Fenced(cfg.Store)
	get, ok := w.read(k, store)
	if !ok {
		return
	}
	w.maybePause(pauseAt, 4)
	if cfg.Work > 0 {
		time.Sleep(time.Duration(w.rng.Int64N(int64(cfg.Work))))
	}
	w.increment(k, int64(resumed.Token()), store, get)
}

// firstHalf is the first process's work: Advance, Get, fenced Put of the
// value plus one. It reports whether the process got as far as its Put (it
// then restarts whatever the Put's outcome).
func (rr *resumeRun) firstHalf(w *worker, k int, lease *lock.Lease, pauseAt int) bool {
	cfg := &rr.r.cfg
	token := int64(lease.Token())
	key := cfg.key(k)
	store := lease.Fenced(cfg.Store)
	w.maybePause(pauseAt, 0)
	if !cfg.Unfenced {
		if w.write(Advance, k, token, 0, 0, func(c context.Context) error { return store.Advance(c, key) }) != OK {
			return false
		}
	}
	w.maybePause(pauseAt, 1)
	get, ok := w.read(k, store)
	if !ok {
		return false
	}
	w.maybePause(pauseAt, 2)
	if cfg.Work > 0 {
		time.Sleep(time.Duration(w.rng.Int64N(int64(cfg.Work))))
	}
	w.increment(k, token, store, get)
	return true
}

// release releases l, best effort: after a pause the lease is long gone
// (ErrNotHeld).
func release(cfg *Config, l *lock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.OpTimeout)
	_ = l.Release(ctx)
	cancel()
}

// check computes the report: Run's checks on the history, then the resume
// checks on the resumes against the grants the history recorded.
func (rr *resumeRun) check(hist, final []Op) *ResumeReport {
	rep := &ResumeReport{Report: rr.r.check(hist, final)}
	rr.mu.Lock()
	resumes := rr.resumes
	rr.mu.Unlock()
	var grants []Op
	for _, o := range hist {
		if o.Kind == Acquire {
			grants = append(grants, o)
		}
	}
	rep.tally(resumes, grants, rr.r.cfg.TTL)
	return rep
}

// tally counts the resumes by outcome and checks each successful one
// against the grants (Acquire operations) of its lock: its token must be the
// one it adopted, which must be the latest granted to its owner, and no
// other owner's grant of the lock may have returned before the Resume was
// called, for that grant ended the owner's lease (a Resume never brings back
// a lease). A refusal is checked too: the lease must not have been certainly
// live until the refusal returned.
func (rep *ResumeReport) tally(resumes []resumeObs, grants []Op, ttl time.Duration) {
	latest := map[string]int64{} // owner -> highest token granted to it
	for _, g := range grants {
		latest[g.Owner] = max(latest[g.Owner], g.Token)
	}
	example := func(what string, o resumeObs, more string) {
		if len(rep.Examples) < 6 {
			rep.Examples = append(rep.Examples, what+": "+o.String()+more)
		}
	}
	for _, o := range resumes {
		rep.Restarts++
		switch {
		case errors.Is(o.Err, lock.ErrNotHeld):
			rep.NotHeld++
			// The owner never releases before the restart, so its lease
			// lasts at least a TTL from Began (less a twentieth for the
			// servers' clock granularity, as in liveHolders).
			if o.Return < o.Began+int64(ttl-ttl/20) {
				rep.RefusedLive++
				example("refused a live lease", o, fmt.Sprintf(" (lease taken from %d, TTL %v)", o.Began, ttl))
			}
			continue
		case o.Err != nil:
			rep.ResumeFailures++
			continue
		}
		rep.Resumed++
		if o.Token != o.Adopted {
			rep.TokenChanged++
			example("resumed with another token", o, "")
		}
		if o.Token != latest[o.Owner] {
			rep.NotLatest++
			example("resumed with a token not the owner's latest grant", o, fmt.Sprintf(" (latest %d)", latest[o.Owner]))
		}
		for _, g := range grants {
			if g.Key == o.Key && g.Owner != o.Owner && g.Token > o.Adopted && g.Return < o.Call {
				rep.Superseded++
				example("resumed after another owner's grant", o, fmt.Sprintf(", after %v", g))
				break
			}
		}
	}
}
