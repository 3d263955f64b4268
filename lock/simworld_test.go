package lock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// The simulated world of one schedule: a lock server and a fenced store that
// keep their state on the synctest bubble's fake clock, the network between
// them and a few client processes, and the checker that watches them. Every
// fault is drawn from the schedule's seed. Everything here runs inside one
// bubble; nothing is shared between schedules.

// simProfile is how stormy one schedule is: the probability of each fault
// per request (or, for evict, per monitor tick).
type simProfile struct {
	slow       float64 // a delay of up to 1.5 TTLs instead of up to 2ms, each way
	lost       float64 // the request is lost: not applied, no reply
	unanswered float64 // applied, but the reply is lost
	dup        float64 // applied twice, the copy while the caller still waits
	ignoreCtx  float64 // the caller's client waits past its context's end
	busy       float64 // the server refuses with a transient error
	permanent  float64 // the server refuses with an error no retry cures
	evict      float64 // an operator force-releases the holder
}

func randomProfile(r *rand.Rand) simProfile {
	p := func(max float64) float64 {
		if r.IntN(3) == 0 {
			return 0 // a third of the schedules are calm in this respect
		}
		return r.Float64() * max
	}
	return simProfile{
		slow: p(0.2), lost: p(0.1), unanswered: p(0.15), dup: p(0.1),
		ignoreCtx: p(0.3), busy: p(0.1), permanent: p(0.01), evict: p(0.02),
	}
}

// simLease is a lease as the simulated server holds it.
type simLease struct {
	owner   string
	token   fence.Token
	expires time.Time
}

// simKey is one key of the simulated store.
type simKey struct {
	value []byte
	fence fence.Token
}

type simWorld struct {
	seed  uint64
	start time.Time
	done  chan struct{} // closed when the actors have finished

	mu           sync.Mutex
	rng          *rand.Rand // network faults and the monitor's choices
	prof         simProfile
	locks        map[string]*simLease
	minted       map[string]fence.Token // the last token minted per name
	maxSeen      map[string]fence.Token // the newest token a client got per name
	keys         map[string]*simKey
	evicted      map[string]bool   // owners an operator evicted
	releasing    map[string]bool   // owners whose holder stopped using the lease
	finished     map[string]string // owners whose Release, Do or Lead returned
	releasesSent map[string]int    // Release calls per owner
	fateCount    map[string]int    // requests per fate stream, see drawFate
	watched      []*Lease
	procs        []*simProc
	closed       bool // after the end: every request is a leaked goroutine's
	violations   []simViolation
	renewals     map[string][]*simRenewal // per owner: its Acquire and Extend requests
	stats        simStats
	trace        []string // what happened, kept only when replaying one seed with -sim.trace
}

// tracef records what happened, for a replay with -sim.trace.
func (w *simWorld) tracef(format string, args ...any) {
	if !*simTrace {
		return
	}
	line := fmt.Sprintf("%12v ", time.Since(w.start)) + fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.trace = append(w.trace, line)
	w.mu.Unlock()
}

// simStats counts what a schedule did, to show that schedules exercise what
// they should.
type simStats struct {
	requests, faults, acquired, extended, released, lost, pauses int
	lateReplies                                                  int // leases lost to a renewal's reply after the deadline
}

func newSimWorld(seed uint64) *simWorld {
	w := &simWorld{
		seed:         seed,
		start:        time.Now(),
		done:         make(chan struct{}),
		rng:          rand.New(rand.NewPCG(seed, 0x5157)),
		locks:        map[string]*simLease{},
		minted:       map[string]fence.Token{},
		maxSeen:      map[string]fence.Token{},
		keys:         map[string]*simKey{},
		evicted:      map[string]bool{},
		releasing:    map[string]bool{},
		finished:     map[string]string{},
		releasesSent: map[string]int{},
		fateCount:    map[string]int{},
		renewals:     map[string][]*simRenewal{},
	}
	w.prof = randomProfile(w.rng)
	return w
}

// simViolation is one broken invariant. kind names the known bugs that
// the simulation was built to find (see simKnownBugs); "" for any other.
type simViolation struct {
	kind, text string
}

// The kinds of violation that the bugs of issue 21 points 5 and 6 cause.
const (
	simBugExtendUnknown   = "extend-unknown"   // a shorter Extend with an unknown outcome left the old, later deadline
	simBugExtendReordered = "extend-reordered" // concurrent Extends answered in reverse order left the later deadline
	simBugErrAfterPause   = "err-after-pause"  // Err said live after the deadline had passed (a paused timer)
)

// fail records a broken invariant, with the simulated time it broke at.
func (w *simWorld) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failLocked(format, args...)
}

func (w *simWorld) failLocked(format string, args ...any) { w.failKindLocked("", format, args...) }

func (w *simWorld) failKind(kind, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failKindLocked(kind, format, args...)
}

func (w *simWorld) failKindLocked(kind, format string, args ...any) {
	if len(w.violations) < 8 {
		text := fmt.Sprintf("at %v: ", time.Since(w.start)) + fmt.Sprintf(format, args...)
		if kind != "" {
			text += " [" + kind + "]"
		}
		w.violations = append(w.violations, simViolation{kind: kind, text: text})
	}
}

// simRenewal is one Acquire or Extend request of an owner, as the checker
// saw it: when it was sent, when it landed (zero if it did not), when its
// reply reached the client (zero if the client never read one).
type simRenewal struct {
	op                     string
	ttl                    time.Duration
	sent, landed, answered time.Time
}

// diagnose names the bug behind a lease that believes it is live while the
// server gave it up: the request whose landing set the server's expiry was
// never answered (the outcome was unknown to the client), or was answered
// before a request that landed earlier. The caller holds w.mu.
func (w *simWorld) diagnose(owner string) string {
	var last *simRenewal
	for _, r := range w.renewals[owner] {
		if !r.landed.IsZero() && (last == nil || !r.landed.Before(last.landed)) {
			last = r
		}
	}
	if last == nil {
		return ""
	}
	if last.answered.IsZero() {
		return simBugExtendUnknown
	}
	for _, r := range w.renewals[owner] {
		if r != last && !r.landed.IsZero() && r.landed.Before(last.landed) && r.answered.After(last.answered) {
			return simBugExtendReordered
		}
	}
	return ""
}

// chance reports true with probability p, from the world's source.
func (w *simWorld) chance(p float64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return p > 0 && w.rng.Float64() < p
}

// simProc is one client process: its Client, its own random source for the
// actors' choices and Acquire's jitter, and the windows of simulated time in
// which it is paused (not scheduled at all).
type simProc struct {
	w      *simWorld
	id     int
	client *Client
	rec    *simRecorder

	mu     sync.Mutex
	rng    *rand.Rand
	pauses [][2]time.Time // [from, to) windows
}

func (p *simProc) intN(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(n)
}

func (p *simProc) chance(q float64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64() < q
}

// between returns a duration in [lo, hi], with nanosecond grain so that
// unrelated events rarely fall on one instant.
func (p *simProc) between(lo, hi time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
}

// pausedUntil returns the end of the pause that covers now, or the zero time.
func (p *simProc) pausedUntil(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var until time.Time
	for _, win := range p.pauses {
		if !now.Before(win[0]) && now.Before(win[1]) && win[1].After(until) {
			until = win[1]
		}
	}
	return until
}

// gate blocks while the process is paused, and lets the caller go on at the
// pause's end plus after. Traffic resumes at the end; the deadline timer one
// nanosecond later, so that the process's own code looks at its lease first,
// as it may after a real pause.
func (p *simProc) gate(after time.Duration) {
	for {
		until := p.pausedUntil(time.Now())
		if until.IsZero() {
			return
		}
		time.Sleep(time.Until(until) + after)
	}
}

// pause stops the whole process for d: its traffic and its deadline timers
// wait, and the calling actor sleeps through it.
func (p *simProc) pause(d time.Duration) {
	now := time.Now()
	p.mu.Lock()
	p.pauses = append(p.pauses, [2]time.Time{now, now.Add(d)})
	p.mu.Unlock()
	p.w.mu.Lock()
	p.w.stats.pauses++
	p.w.mu.Unlock()
	time.Sleep(d)
}

// simFate is what the network and the server do with one request.
type simFate struct {
	up, down    time.Duration
	lost        bool // not applied, no reply
	unanswered  bool // applied, no reply
	dup         bool // applied a second time before the reply
	ignoreCtx   bool
	busy        bool
	permanent   bool
	readTimeout time.Duration // when the client gives up on a missing reply
}

// drawFate draws the fate of process p's request op. Goroutines that run at
// the same simulated instant reach this in an order the Go scheduler picks,
// so each request draws from a stream of its own, named by the process, the
// operation, its TTL (random to the nanosecond, so two concurrent Extends
// differ) and how many such requests came before: the same seed then gives
// the same fates whatever the interleaving.
func (w *simWorld) drawFate(p *simProc, op string, ttl time.Duration) simFate {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := fmt.Sprintf("%d/%s/%d", p.id, op, ttl)
	n := w.fateCount[key]
	w.fateCount[key] = n + 1
	h := fnv.New64a()
	h.Write([]byte(key))
	r, pr := rand.New(rand.NewPCG(w.seed^h.Sum64(), uint64(n))), w.prof
	delay := func() time.Duration {
		if r.Float64() < pr.slow {
			return time.Duration(r.Int64N(int64(ttl) * 3 / 2))
		}
		return time.Duration(r.Int64N(int64(2 * time.Millisecond)))
	}
	f := simFate{up: delay(), down: delay(), readTimeout: 5*time.Millisecond + time.Duration(r.Int64N(int64(ttl)))}
	switch x := r.Float64(); {
	case x < pr.lost:
		f.lost = true
	case x < pr.lost+pr.unanswered:
		f.unanswered = true
	case x < pr.lost+pr.unanswered+pr.busy:
		f.busy = true
	case x < pr.lost+pr.unanswered+pr.busy+pr.permanent:
		f.permanent = true
	}
	f.dup = r.Float64() < pr.dup
	f.ignoreCtx = r.Float64() < pr.ignoreCtx
	w.stats.requests++
	if f.lost || f.unanswered || f.busy || f.permanent || f.dup || f.up+f.down > 4*time.Millisecond {
		w.stats.faults++
	}
	return f
}

// simReply is a server's answer.
type simReply struct {
	token  fence.Token
	info   driver.Info
	record fence.Record
	err    error
}

var (
	errSimBusy      = errors.New("sim: server busy, try again")
	errSimPermanent = errors.New("sim: the server refused the request for good")
	errSimTimeout   = errors.New("sim: i/o timeout waiting for the reply")
	errSimClosed    = errors.New("sim: the schedule is over")
)

// roundTrip carries one request of process p from the client to the server
// and its reply back, with the fate drawn for it. apply runs on the server,
// under w.mu. owner names the lease the request is about ("" for store
// requests) and op what it is, for the checks of leaked goroutines.
func (w *simWorld) roundTrip(ctx context.Context, p *simProc, op, owner string, ttl time.Duration, apply func() simReply) simReply {
	if op == "Release" {
		w.mu.Lock()
		w.releasesSent[owner]++ // tried, even if never sent
		w.mu.Unlock()
	}
	p.gate(0) // a paused process sends nothing
	if err := ctx.Err(); err != nil {
		return simReply{err: err} // the client sends nothing on an ended context
	}
	w.mu.Lock()
	if w.closed {
		w.failLocked("process %d sent %s for %.8s after the schedule ended: a goroutine outlived its call", p.id, op, owner)
		w.mu.Unlock()
		return simReply{err: fmt.Errorf("%w: %w", ErrNotHeld, errSimClosed)}
	}
	if what, ok := w.finished[owner]; ok && owner != "" {
		w.failLocked("process %d sent %s for %.8s after %s returned: a goroutine outlived it", p.id, op, owner, what)
	}
	w.mu.Unlock()
	f := w.drawFate(p, op, ttl)
	if owner == "" {
		f.dup = false // a resent store write is not an increment: only lock requests are idempotent
	}
	w.tracef("p%d %s %.8s ttl=%v fate=%+v", p.id, op, owner, ttl, f)
	var rn *simRenewal
	if op == "Acquire" || op == "Extend" {
		rn = &simRenewal{op: op, ttl: ttl, sent: time.Now()}
		w.mu.Lock()
		w.renewals[owner] = append(w.renewals[owner], rn)
		w.mu.Unlock()
	}
	reply := make(chan simReply, 1)
	go func() {
		time.Sleep(f.up)
		var rep simReply
		switch {
		case f.lost:
			return
		case f.busy:
			rep.err = driver.Transient(errSimBusy)
		case f.permanent:
			rep.err = errSimPermanent
		default:
			rep = w.serve(apply, rn)
			w.tracef("p%d %s %.8s applied: %v %v", p.id, op, owner, rep.token, rep.err)
			if f.dup {
				w.serve(apply, rn) // a resend by the client library: the caller sees one answer
			}
		}
		if f.unanswered {
			return
		}
		time.Sleep(f.down)
		reply <- rep // into the socket's buffer: a paused process reads it when it runs
	}()
	timeout := time.NewTimer(f.readTimeout)
	defer timeout.Stop()
	done := ctx.Done()
	if f.ignoreCtx {
		done = nil // like go-redis with ContextTimeoutEnabled=false
	}
	select {
	case rep := <-reply:
		p.gate(0)
		w.tracef("p%d %s %.8s reply delivered: %v", p.id, op, owner, rep.err)
		if rn != nil && ctx.Err() == nil {
			// (After the context's end the Client has stopped waiting:
			// the reply reaches no one, and the outcome stays unknown.)
			w.mu.Lock()
			rn.answered = time.Now()
			w.mu.Unlock()
		}
		return rep
	case <-done:
		return simReply{err: fmt.Errorf("sim: %w", ctx.Err())}
	case <-timeout.C:
		// A paused process sees its read deadline only when it runs
		// again, and then reads a reply that came meanwhile first.
		p.gate(0)
		select {
		case rep := <-reply:
			w.tracef("p%d %s %.8s reply read after a pause: %v", p.id, op, owner, rep.err)
			if rn != nil && ctx.Err() == nil {
				w.mu.Lock()
				rn.answered = time.Now()
				w.mu.Unlock()
			}
			return rep
		default:
		}
		return simReply{err: driver.Transient(errSimTimeout)}
	}
}

// serve applies one request on the server, then checks every lease's belief
// if the request gave the lock to a new owner.
func (w *simWorld) serve(apply func() simReply, rn *simRenewal) simReply {
	w.mu.Lock()
	before := make(map[string]string, len(w.locks))
	for name, l := range w.locks {
		before[name] = l.owner
	}
	rep := apply()
	if rn != nil && rep.err == nil {
		rn.landed = time.Now()
	}
	var changed []string
	for name, l := range w.locks {
		if before[name] != l.owner {
			changed = append(changed, name)
		}
	}
	w.mu.Unlock()
	slices.Sort(changed)
	for _, name := range changed {
		w.checkBeliefs(name, "the lock was granted to another owner")
	}
	return rep
}

// live returns name's lease if it has not expired. The caller holds w.mu.
func (w *simWorld) live(name string) *simLease {
	l := w.locks[name]
	if l == nil || !time.Now().Before(l.expires) {
		return nil
	}
	return l
}

// simBackend is the lock server as process p reaches it. It keeps plain
// locks, as it always has: the simulation's Clients poll
// (QueueOptions.Polling) and ask for no other shape, so the requests it does
// not serve (a place in line, a set, a resume, a permit, Await and Leave)
// never come; if one did, the schedule fails. It checks every request as
// the Client promises to have checked it (driver.Validate), and an invalid
// one fails the schedule too.
type simBackend struct{ p *simProc }

// unserved fails the schedule for a request the simulated server does not
// serve, and refuses it as a backend without that shape would.
func (b simBackend) unserved(what string) error {
	b.p.w.fail("process %d sent %s, which the simulated server does not serve", b.p.id, what)
	return fmt.Errorf("%w: %s", driver.ErrUnsupported, what)
}

// invalid fails the schedule for a request that the Client should have
// refused before sending it.
func (b simBackend) invalid(op string, err error) error {
	if err != nil {
		b.p.w.fail("process %d sent an invalid %s: %v", b.p.id, op, err)
	}
	return err
}

func (b simBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := b.invalid("Acquire", driver.Validate(req)); err != nil {
		return driver.Grant{}, err
	}
	if req.Names != nil || req.Resume || req.Place > 0 || req.Kind != driver.Exclusive {
		return driver.Grant{}, b.unserved(fmt.Sprintf("Acquire %+v", req))
	}
	name, owner, ttl := req.Name, req.Owner, req.TTL
	w := b.p.w
	rep := w.roundTrip(ctx, b.p, "Acquire", owner, ttl, func() simReply {
		now := time.Now()
		if l := w.live(name); l != nil {
			if l.owner != owner {
				return simReply{err: &driver.HeldError{Name: name, TTL: l.expires.Sub(now)}}
			}
			l.expires = now.Add(ttl)
			return simReply{token: l.token}
		}
		w.minted[name]++
		w.locks[name] = &simLease{owner: owner, token: w.minted[name], expires: now.Add(ttl)}
		return simReply{token: w.minted[name]}
	})
	return driver.Grant{Token: rep.token}, rep.err
}

func (b simBackend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if err := b.invalid("Extend", errors.Join(driver.ValidateClaim(c), driver.ValidateTTL(ttl))); err != nil {
		return err
	}
	if c.Kind != driver.Exclusive {
		return b.unserved(fmt.Sprintf("Extend %+v", c))
	}
	name, owner := c.Name, c.Owner
	w := b.p.w
	return w.roundTrip(ctx, b.p, "Extend", owner, ttl, func() simReply {
		l := w.live(name)
		if l == nil || l.owner != owner {
			return simReply{err: driver.NotHeld(name)}
		}
		l.expires = time.Now().Add(ttl)
		return simReply{}
	}).err
}

func (b simBackend) Release(ctx context.Context, c driver.Claim) error {
	if err := b.invalid("Release", driver.ValidateClaim(c)); err != nil {
		return err
	}
	if c.Kind != driver.Exclusive {
		return b.unserved(fmt.Sprintf("Release %+v", c))
	}
	name, owner := c.Name, c.Owner
	w := b.p.w
	return w.roundTrip(ctx, b.p, "Release", owner, 50*time.Millisecond, func() simReply {
		l := w.live(name)
		if l == nil || l.owner != owner {
			return simReply{err: driver.NotHeld(name)}
		}
		delete(w.locks, name)
		return simReply{}
	}).err
}

func (b simBackend) Await(_ context.Context, c driver.Claim, _ time.Duration) error {
	return b.unserved(fmt.Sprintf("Await %+v", c))
}

func (b simBackend) Leave(_ context.Context, c driver.Claim) error {
	return b.unserved(fmt.Sprintf("Leave %+v", c))
}

func (b simBackend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind != driver.Exclusive {
		return driver.Info{}, b.unserved(fmt.Sprintf("Inspect of %v %q", kind, name))
	}
	w := b.p.w
	rep := w.roundTrip(ctx, b.p, "Inspect", "", 50*time.Millisecond, func() simReply {
		info := driver.Info{Name: name, Kind: driver.Exclusive}
		if l := w.live(name); l != nil {
			info.Holders = []driver.Holder{{Owner: l.owner, Kind: driver.Exclusive, Token: l.token, TTL: time.Until(l.expires)}}
		}
		return simReply{info: info}
	})
	return rep.info, rep.err
}

// simStore is the fenced store as process p reaches it. Its keys hold
// counters, and every accepted Put must be the increment of the value it
// replaces: fenced holders that raise the fence before they read never lose
// an update, whatever the schedule.
type simStore struct{ p *simProc }

func (s simStore) write(ctx context.Context, op, key string, token fence.Token, apply func(k *simKey)) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	w := s.p.w
	return w.roundTrip(ctx, s.p, op, "", 50*time.Millisecond, func() simReply {
		k := w.keys[key]
		if k == nil {
			k = &simKey{}
			w.keys[key] = k
		}
		if token < k.fence {
			return simReply{err: &fence.StaleError{Key: key, Token: token, Fence: k.fence}}
		}
		k.fence = token
		apply(k)
		return simReply{}
	}).err
}

func (s simStore) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	return s.write(ctx, "Put", key, token, func(k *simKey) {
		want := simCounter(k.value) + 1
		if got := simCounter(value); got != want {
			s.p.w.failLocked("lost update: Put of %d with token %d over %d accepted by %q", got, token, want-1, key)
		}
		k.value = slices.Clone(value)
	})
}

func (s simStore) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "Delete", key, token, func(k *simKey) { k.value = nil })
}

func (s simStore) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "Advance", key, token, func(*simKey) {})
}

func (s simStore) Get(ctx context.Context, key string) (fence.Record, error) {
	w := s.p.w
	rep := w.roundTrip(ctx, s.p, "Get", "", 50*time.Millisecond, func() simReply {
		k := w.keys[key]
		if k == nil || k.value == nil {
			var f fence.Token
			if k != nil {
				f = k.fence
			}
			return simReply{record: fence.Record{Fence: f}, err: fmt.Errorf("%w: %q", fence.ErrNotFound, key)}
		}
		return simReply{record: fence.Record{Value: slices.Clone(k.value), Fence: k.fence}}
	})
	return rep.record, rep.err
}

func simCounter(v []byte) int {
	n, _ := strconv.Atoi(string(v))
	return n
}

// checkBeliefs checks every watched lease on name: one whose holder believes
// it is live must be held by its owner at the server. It only reads the
// lease (no Err call that could end it), so that checking does not change
// the schedule.
func (w *simWorld) checkBeliefs(name, when string) {
	w.mu.Lock()
	leases := slices.Clone(w.watched)
	w.mu.Unlock()
	for _, l := range leases {
		if l.name == name {
			w.checkBelief(l, when)
		}
	}
}

func (w *simWorld) checkBelief(l *Lease, when string) {
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	now := time.Now()
	if l.ctx.Err() != nil || !now.Before(deadline) {
		return // the holder does not believe it is live
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.releasing[l.owner] || w.evicted[l.owner] {
		return // its holder let it go, or an operator took it away
	}
	held := w.live(l.name)
	kind := w.diagnose(l.owner)
	switch {
	case held == nil:
		w.failKindLocked(kind, "%s: lease %q token %d (owner %.8s) believes it is live for %v more, but the server has no lease", when, l.name, l.token, l.owner, deadline.Sub(now))
	case held.owner != l.owner:
		w.failKindLocked(kind, "%s: lease %q token %d (owner %.8s) believes it is live for %v more, but the server holds token %d for %.8s", when, l.name, l.token, l.owner, deadline.Sub(now), held.token, held.owner)
	}
}

// watch registers a lease that an actor got, and checks that its token is
// newer than every token a client got before for the name.
func (w *simWorld) watch(l *Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Contains(w.watched, l) {
		return
	}
	if l.token <= w.maxSeen[l.name] && !w.evicted[l.owner] {
		// (An operator may evict a lease before its acquire reply
		// arrives; the next holder's token is then already out.)
		w.failLocked("lease %q got token %d, not above the %d a client already had", l.name, l.token, w.maxSeen[l.name])
	}
	w.maxSeen[l.name] = l.token
	w.watched = append(w.watched, l)
	w.stats.acquired++
}

// letGo records that the holder of owner's lease stopped relying on it (it
// called Release, or its function returned).
func (w *simWorld) letGo(owner string) {
	w.mu.Lock()
	w.releasing[owner] = true
	w.mu.Unlock()
}

// finish records that the call that owned owner's lease returned: no
// goroutine of the client may send anything for it from now on.
func (w *simWorld) finish(owner, what string) {
	w.mu.Lock()
	w.finished[owner] = what
	w.mu.Unlock()
}

// monitor checks every lease's belief at random moments, and now and then
// plays the operator who force-releases a holder.
func (w *simWorld) monitor(names []string) {
	for {
		w.mu.Lock()
		d := 500*time.Microsecond + time.Duration(w.rng.Int64N(int64(3*time.Millisecond)))
		name := names[w.rng.IntN(len(names))]
		evict := w.prof.evict > 0 && w.rng.Float64() < w.prof.evict
		w.mu.Unlock()
		select {
		case <-w.done:
			return
		case <-time.After(d):
		}
		if evict {
			w.mu.Lock()
			if l := w.live(name); l != nil {
				w.trace = append(w.trace, fmt.Sprintf("%12v evict %.8s", time.Since(w.start), l.owner))
				w.evicted[l.owner] = true
				delete(w.locks, name)
			}
			w.mu.Unlock()
		}
		for _, n := range names {
			w.checkBeliefs(n, "monitor")
		}
	}
}
