package drivertest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// This file holds mutants of the newest capabilities (permits, sets,
// resume, queued waiting): each a realistic bug written over the correct
// memory backend, with a control that shows the mutant misbehaving (and
// the memory backend not) by calling it directly, independent of the
// suite, and the checks of the suite that must fail on it.

// bug is one mutant's bug.
type bug int

const (
	correct bug = iota

	// Permits.
	releaseTwiceFreesSlot   // a second Release of a permit, answered ErrNotHeld, still frees a slot (a counted semaphore that decrements before it checks the owner)
	releaseExpiredFreesSlot // the Release of an expired permit, answered ErrNotHeld, still frees a slot
	extendRevivesExpired    // Extend of an expired (not released) permit takes it again
	extendNoRenew           // Extend of a live permit answers nil and renews nothing
	readerPastQueuedWriter  // the writers' places are kept apart, where the readers' admission does not look
	permitRenewalToTail     // a renewal of a permit place moves the waiter to the tail
	permitPlacesNeverExpire // permit places live an hour, whatever was asked
	permitDropsEarlyWake    // Await of a permit forgets a wake-up sent before it began
	releaseWakesOne         // a Release of a permit wakes only the first waiter in line
	writerRetryOwnPrior     // a writer's same-owner retry reports its own token as its prior writer
	permitLeaveWrongPlace   // Leave of a permit place removes the first place in line, not the owner's
	permitLeaveFreesHolder  // Leave by a permit holder releases its permit
	readTokensApart         // read permits get tokens from a counter of their own
	permitInspectNoWaiting  // Inspect of a permit name reports nobody waiting
	permitInspectOneHolder  // Inspect of a permit name reports one holder at most
	permitRenewalNoExtend   // a renewal of a permit place keeps its first expiry
	permitAwaitIgnoresCtx   // Await of a permit does not look at its context
	permitLeaveWakesNobody  // Leave of the first permit place in line wakes nobody

	// The line of a lock.
	lockRenewalToTail   // a renewal of a lock's place moves the waiter to the tail
	lockLeaveWrongPlace // Leave removes the first place in line, not the owner's
	lockLeaveFreesLock  // Leave by the holder releases the lock

	// Sets.
	refusedSetDropsOwned // a refused set releases the names its owner held before (a roll-back that deletes every name of the owner)
	setTokensSorted      // a set's tokens come back in sorted order, not the caller's
	setRetryNoRenew      // a same-owner set retry stores the metadata but keeps the old expiry
	setSeenInParts       // a set taken name by name and rolled back when one is busy: refused in the end, but seen in part meanwhile
	setDropsMetadata     // a set stores no metadata

	// Resume.
	resumeTwoSteps      // Resume reads the token, then renews the owner's lease in a second step
	resumeRenewThenRead // Resume renews the owner's lease, then reads the token in a second step
)

// mkey is an owner's claim on a permit or lock name, in the mutant's own
// bookkeeping.
type mkey struct{ name, owner string }

// mgrant is a permit the mutant granted and has not seen released.
type mgrant struct {
	kind  driver.Kind
	limit int
	token fence.Token // the token the mutant returned
	real  fence.Token // the memory backend's
}

// mplace is a place in a line the mutant keeps itself.
type mplace struct {
	owner   string
	expires time.Time
	box     chan struct{}
}

// mutant is the memory backend with one bug.
type mutant struct {
	driver.Backend
	bug bug

	// step runs between the two steps of setSeenInParts and
	// resumeTwoSteps; nil: a round trip's pause.
	step func()

	mu      sync.Mutex
	granted map[mkey]mgrant
	queued  map[mkey]bool
	expires map[mkey]time.Time   // permitRenewalNoExtend: each place's first expiry
	lines   map[string][]*mplace // the lines the mutant keeps itself, first in line first
	reads   fence.Token          // readTokensApart: the readers' counter
}

func newMutant(b bug) *mutant {
	return &mutant{Backend: memory.NewBackend(), bug: b, granted: map[mkey]mgrant{}, queued: map[mkey]bool{}, expires: map[mkey]time.Time{}, lines: map[string][]*mplace{}}
}

func (m *mutant) pause() {
	if m.step != nil {
		m.step()
		return
	}
	time.Sleep(time.Millisecond)
}

// ownLine says whether the mutant keeps the line of req itself (besides
// the memory backend's).
func (m *mutant) ownLine(kind driver.Kind) bool {
	switch m.bug {
	case releaseWakesOne, permitLeaveWrongPlace, permitLeaveWakesNobody:
		return kind.Permit()
	case lockLeaveWrongPlace:
		return kind == driver.Exclusive
	}
	return false
}

func (m *mutant) enqueue(name, owner string, expires time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.lines[name] {
		if p.owner == owner {
			p.expires = expires
			return
		}
	}
	m.lines[name] = append(m.lines[name], &mplace{owner: owner, expires: expires, box: wake.NewBox()})
}

func (m *mutant) dequeue(name, owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lines[name] = slices.DeleteFunc(m.lines[name], func(p *mplace) bool { return p.owner == owner })
}

// own returns owner's place in the mutant's line of name, nil if none.
func (m *mutant) own(name, owner string) *mplace {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.lines[name] {
		if p.owner == owner {
			return p
		}
	}
	return nil
}

func (m *mutant) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	switch {
	case req.Names != nil:
		return m.acquireSet(ctx, req)
	case req.Resume:
		return m.resume(ctx, req)
	}
	k := mkey{req.Name, req.Owner}
	claim := driver.Claim{Name: req.Name, Owner: req.Owner, Kind: req.Kind}
	if req.Kind.Permit() && m.bug == permitPlacesNeverExpire && req.Place > 0 {
		req.Place = time.Hour
	}
	place := req.Place
	writerApart := m.bug == readerPastQueuedWriter && req.Kind == driver.Write && req.Place > 0
	if writerApart {
		req.Place = 0 // the writer's place is kept below, apart
	}
	m.mu.Lock()
	wasQueued := m.queued[k]
	prev, retry := m.granted[k]
	if m.bug == permitRenewalNoExtend && req.Kind.Permit() && req.Place > 0 {
		// A renewal keeps the place's first expiry, while it lasts.
		// (Once it ran out, the memory backend dropped it: the request
		// adds a new place, whose expiry is set.)
		if exp, ok := m.expires[k]; ok && time.Now().Before(exp) {
			req.Place = max(time.Until(exp), driver.MinPlaceTTL)
		} else {
			m.expires[k] = time.Now().Add(req.Place)
		}
	}
	m.mu.Unlock()
	g, err := m.Backend.Acquire(ctx, req)
	toTail := (m.bug == permitRenewalToTail && req.Kind.Permit()) || (m.bug == lockRenewalToTail && req.Kind == driver.Exclusive)
	if toTail && wasQueued && req.Place > 0 && errors.Is(err, driver.ErrHeld) {
		_ = m.Backend.Leave(ctx, claim)
		g, err = m.Backend.Acquire(ctx, req)
	}
	m.mu.Lock()
	if place > 0 && errors.Is(err, driver.ErrHeld) {
		m.queued[k] = true
	} else {
		delete(m.queued, k)
	}
	m.mu.Unlock()
	held := errors.Is(err, driver.ErrHeld)
	switch {
	case writerApart && held:
		m.enqueue(req.Name, req.Owner, time.Now().Add(place))
	case m.ownLine(req.Kind) && req.Place > 0 && held:
		m.enqueue(req.Name, req.Owner, time.Now().Add(req.Place))
	case err == nil && (writerApart || m.ownLine(req.Kind)):
		m.dequeue(req.Name, req.Owner)
	}
	if err != nil || !req.Kind.Permit() {
		return g, err
	}
	real := g.Token
	switch {
	case m.bug == writerRetryOwnPrior && req.Kind == driver.Write && retry && prev.real == real:
		g.PriorWriter = g.Token
	case m.bug == readTokensApart && req.Kind == driver.Read:
		if retry && prev.real == real {
			g.Token = prev.token
		} else {
			m.mu.Lock()
			m.reads++
			g.Token = m.reads
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	m.granted[k] = mgrant{kind: req.Kind, limit: req.Limit, token: g.Token, real: real}
	m.mu.Unlock()
	return g, nil
}

// acquireSet is the Acquire of a set.
func (m *mutant) acquireSet(ctx context.Context, req driver.Request) (driver.Grant, error) {
	switch m.bug {
	case setTokensSorted:
		req.Names = slices.Sorted(slices.Values(req.Names))
	case setDropsMetadata:
		req.Metadata = ""
	case setRetryNoRenew:
		tokens, ok := m.heldByOwner(ctx, req)
		if ok {
			return driver.Grant{Tokens: tokens}, nil
		}
	case setSeenInParts:
		var taken []string
		tokens := make([]fence.Token, len(req.Names))
		for i, n := range req.Names {
			one := req
			one.Names, one.Name = nil, n
			g, err := m.Backend.Acquire(ctx, one)
			if err != nil {
				for _, t := range taken {
					_ = m.Backend.Release(ctx, driver.Claim{Name: t, Owner: req.Owner, Kind: driver.Exclusive})
				}
				return driver.Grant{}, err
			}
			taken = append(taken, n)
			tokens[i] = g.Token
			m.pause()
		}
		return driver.Grant{Tokens: tokens}, nil
	}
	g, err := m.Backend.Acquire(ctx, req)
	if m.bug == refusedSetDropsOwned && errors.Is(err, driver.ErrHeld) {
		for _, n := range req.Names {
			_ = m.Backend.Release(ctx, driver.Claim{Name: n, Owner: req.Owner, Kind: driver.Exclusive})
		}
	}
	return g, err
}

// heldByOwner is setRetryNoRenew's retry: when req.Owner holds every name
// of the set, it stores the new metadata with the old expiry (a same-owner
// acquire for the TTL left) and returns the tokens.
func (m *mutant) heldByOwner(ctx context.Context, req driver.Request) ([]fence.Token, bool) {
	left := make([]time.Duration, len(req.Names))
	for i, n := range req.Names {
		info, err := m.Backend.Inspect(ctx, n, driver.Exclusive)
		if err != nil || len(info.Holders) != 1 || info.Holders[0].Owner != req.Owner || info.Holders[0].TTL < driver.MinTTL {
			return nil, false
		}
		left[i] = info.Holders[0].TTL
	}
	tokens := make([]fence.Token, len(req.Names))
	for i, n := range req.Names {
		g, err := m.Backend.Acquire(ctx, driver.Request{Name: n, Owner: req.Owner, TTL: left[i], Kind: driver.Exclusive, Metadata: req.Metadata})
		if err != nil {
			return nil, false
		}
		tokens[i] = g.Token
	}
	return tokens, true
}

// resume is the Acquire of a resume.
func (m *mutant) resume(ctx context.Context, req driver.Request) (driver.Grant, error) {
	claim := driver.Claim{Name: req.Name, Owner: req.Owner, Kind: driver.Exclusive}
	switch m.bug {
	case resumeTwoSteps:
	case resumeRenewThenRead:
		if err := m.Backend.Extend(ctx, claim, req.TTL); err != nil {
			return driver.Grant{}, err
		}
		m.pause()
		info, err := m.Backend.Inspect(ctx, req.Name, driver.Exclusive)
		if err != nil || len(info.Holders) != 1 || info.Holders[0].Owner != req.Owner {
			return driver.Grant{}, driver.NotHeld(req.Name)
		}
		return driver.Grant{Token: info.Holders[0].Token}, nil
	default:
		return m.Backend.Acquire(ctx, req)
	}
	info, err := m.Backend.Inspect(ctx, req.Name, driver.Exclusive)
	if err != nil {
		return driver.Grant{}, err
	}
	if len(info.Holders) != 1 || info.Holders[0].Owner != req.Owner {
		return driver.Grant{}, driver.NotHeld(req.Name)
	}
	m.pause()
	err = m.Backend.Extend(ctx, claim, req.TTL)
	return driver.Grant{Token: info.Holders[0].Token}, err
}

func (m *mutant) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if !c.Kind.Permit() {
		return m.Backend.Extend(ctx, c, ttl)
	}
	k := mkey{c.Name, c.Owner}
	if m.bug == extendNoRenew {
		info, err := m.Backend.Inspect(ctx, c.Name, c.Kind)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(info.Holders, func(h driver.Holder) bool { return h.Owner == c.Owner }) {
			return nil
		}
		return driver.NotHeld(c.Name)
	}
	err := m.Backend.Extend(ctx, c, ttl)
	m.mu.Lock()
	g, expired := m.granted[k]
	m.mu.Unlock()
	if m.bug == extendRevivesExpired && expired && errors.Is(err, driver.ErrNotHeld) {
		_, err = m.Backend.Acquire(ctx, driver.Request{Name: c.Name, Owner: c.Owner, TTL: ttl, Kind: g.kind, Limit: g.limit})
	}
	return err
}

func (m *mutant) Release(ctx context.Context, c driver.Claim) error {
	if !c.Kind.Permit() {
		return m.Backend.Release(ctx, c)
	}
	k := mkey{c.Name, c.Owner}
	m.mu.Lock()
	_, expired := m.granted[k] // granted, not released: ErrNotHeld means it expired
	delete(m.granted, k)
	m.mu.Unlock()
	err := m.Backend.Release(ctx, c)
	if errors.Is(err, driver.ErrNotHeld) && (m.bug == releaseTwiceFreesSlot && !expired || m.bug == releaseExpiredFreesSlot && expired) {
		m.freeASlot(ctx, c)
	}
	if err == nil && m.ownLine(c.Kind) {
		m.mu.Lock()
		for i, p := range m.lines[c.Name] {
			if i == 0 || m.bug != releaseWakesOne {
				wake.Post(p.box)
			}
		}
		m.mu.Unlock()
	}
	return err
}

// freeASlot frees the slot that a counted semaphore's count would have
// lost: the memory backend counts its holders, so the oldest one goes.
func (m *mutant) freeASlot(ctx context.Context, c driver.Claim) {
	info, err := m.Backend.Inspect(ctx, c.Name, c.Kind)
	if err != nil || len(info.Holders) == 0 {
		return
	}
	oldest := slices.MinFunc(info.Holders, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	_ = m.Backend.Release(ctx, driver.Claim{Name: c.Name, Owner: oldest.Owner, Kind: oldest.Kind})
}

func (m *mutant) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	switch {
	case m.bug == permitDropsEarlyWake && c.Kind.Permit():
		_ = m.Backend.Await(ctx, c, 0) // forget what came before
	case m.bug == permitAwaitIgnoresCtx && c.Kind.Permit():
		return m.Backend.Await(context.WithoutCancel(ctx), c, max)
	case m.ownLine(c.Kind):
		if p := m.own(c.Name, c.Owner); p != nil {
			return wake.Wait(ctx, p.box, max)
		}
	case m.bug == readerPastQueuedWriter && c.Kind.Permit():
		if p := m.own(c.Name, c.Owner); p != nil {
			return wake.Wait(ctx, nil, min(max, 5*time.Millisecond)) // it polls
		}
	}
	return m.Backend.Await(ctx, c, max)
}

func (m *mutant) Leave(ctx context.Context, c driver.Claim) error {
	permit := c.Kind.Permit()
	switch {
	case m.bug == permitLeaveFreesHolder && permit, m.bug == lockLeaveFreesLock && !permit:
		_ = m.Backend.Release(ctx, c)
	case m.bug == permitLeaveWrongPlace && permit, m.bug == lockLeaveWrongPlace && !permit:
		m.mu.Lock()
		if line := m.lines[c.Name]; len(line) > 0 {
			c.Owner = line[0].owner
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	delete(m.queued, mkey{c.Name, c.Owner})
	m.mu.Unlock()
	m.dequeue(c.Name, c.Owner)
	return m.Backend.Leave(ctx, c)
}

func (m *mutant) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	info, err := m.Backend.Inspect(ctx, name, kind)
	if err != nil || !kind.Permit() {
		return info, err
	}
	switch m.bug {
	case permitInspectNoWaiting:
		info.Waiting = 0
	case permitInspectOneHolder:
		info.Holders = info.Holders[:min(1, len(info.Holders))]
	case readerPastQueuedWriter:
		m.mu.Lock()
		for _, p := range m.lines[name] {
			if time.Now().Before(p.expires) {
				info.Waiting++
			}
		}
		m.mu.Unlock()
	}
	return info, nil
}

// The controls call a backend directly. Each returns an error that
// describes the misbehaviour it saw, nil when the backend behaved.

func sem(name, owner string, n int, ttl, place time.Duration) driver.Request {
	return driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Semaphore, Limit: n, Place: place}
}

func rwReq(name, owner string, kind driver.Kind, ttl, place time.Duration) driver.Request {
	return driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: kind, Place: place}
}

func lockReq(name, owner string, ttl, place time.Duration) driver.Request {
	return driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: place}
}

func pc(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Semaphore}
}

func lc(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
}

// steps records the first failure of a control's setup: a call that must
// succeed (must) or be refused with ErrHeld (held) and did not. A setup
// step that fails is a fault of the control, not a bug it saw.
type steps struct{ err error }

func (s *steps) must(what string, err error) {
	if s.err == nil && err != nil {
		s.err = fmt.Errorf("control step %s: %w", what, err)
	}
}

func (s *steps) held(what string, err error) {
	if s.err == nil && !errors.Is(err, driver.ErrHeld) {
		s.err = fmt.Errorf("control step %s: %v; want ErrHeld", what, err)
	}
}

func acq(ctx context.Context, b driver.Backend, req driver.Request) error {
	_, err := b.Acquire(ctx, req)
	return err
}

// errSetup marks a control that could not run: the test fails on it
// whichever backend it ran on.
var errSetup = errors.New("control setup failed")

// outcome is what a control returns: the setup's error (wrapped in
// errSetup), else the misbehaviour seen.
func outcome(s *steps, bug error) error {
	if s.err != nil {
		return fmt.Errorf("%w: %v", errSetup, s.err)
	}
	return bug
}

// holders returns the owners of name's live permits, sorted.
func holders(ctx context.Context, b driver.Backend, name string) []string {
	info, _ := b.Inspect(ctx, name, driver.Semaphore)
	var hs []string
	for _, h := range info.Holders {
		hs = append(hs, h.Owner)
	}
	slices.Sort(hs)
	return hs
}

// pollUntil polls cond every 2ms until it holds, at most for d.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// awaitMax bounds the Awaits of the controls: one that a wake-up should
// have ended at once and that takes nearly this long was not woken.
const awaitMax = 600 * time.Millisecond

// awaitTook is how long Await of claim took, at most max.
func awaitTook(ctx context.Context, b driver.Backend, c driver.Claim, max time.Duration) time.Duration {
	start := time.Now()
	_ = b.Await(ctx, c, max)
	return time.Since(start)
}

func ctlReleaseTwice(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("a takes", acq(ctx, b, sem(n, "a", 2, time.Minute, 0)))
	s.must("a releases", b.Release(ctx, pc(n, "a")))
	s.must("c takes", acq(ctx, b, sem(n, "c", 2, time.Minute, 0)))
	s.must("d takes", acq(ctx, b, sem(n, "d", 2, time.Minute, 0)))
	if err := b.Release(ctx, pc(n, "a")); !errors.Is(err, driver.ErrNotHeld) {
		s.must("a releases again", fmt.Errorf("%v; want ErrNotHeld", err))
	}
	if hs := holders(ctx, b, n); !slices.Equal(hs, []string{"c", "d"}) {
		return outcome(&s, fmt.Errorf("a second release, answered ErrNotHeld, left holders %q of c, d", hs))
	}
	return outcome(&s, nil)
}

func ctlReleaseExpired(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("c takes", acq(ctx, b, sem(n, "c", 2, time.Minute, 0)))
	s.must("e takes for 20ms", acq(ctx, b, sem(n, "e", 2, 20*time.Millisecond, 0)))
	pollUntil(time.Second, func() bool { return len(holders(ctx, b, n)) == 1 })
	s.must("f takes", acq(ctx, b, sem(n, "f", 2, time.Minute, 0)))
	if err := b.Release(ctx, pc(n, "e")); !errors.Is(err, driver.ErrNotHeld) {
		s.must("e releases after expiry", fmt.Errorf("%v; want ErrNotHeld", err))
	}
	if hs := holders(ctx, b, n); !slices.Equal(hs, []string{"c", "f"}) {
		return outcome(&s, fmt.Errorf("the release of an expired permit, answered ErrNotHeld, left holders %q of c, f", hs))
	}
	return outcome(&s, nil)
}

func ctlExtendRevives(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("e takes for 20ms", acq(ctx, b, sem(n, "e", 2, 20*time.Millisecond, 0)))
	pollUntil(time.Second, func() bool { return len(holders(ctx, b, n)) == 0 })
	if err := b.Extend(ctx, pc(n, "e"), time.Minute); err == nil {
		return outcome(&s, fmt.Errorf("Extend of an expired permit succeeded; holders now %q", holders(ctx, b, n)))
	}
	return outcome(&s, nil)
}

func ctlExtendNoRenew(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("a takes for 1s", acq(ctx, b, sem(n, "a", 2, time.Second, 0)))
	s.must("a extends to 1m", b.Extend(ctx, pc(n, "a"), time.Minute))
	info, err := b.Inspect(ctx, n, driver.Semaphore)
	s.must("inspect", err)
	if len(info.Holders) == 1 && info.Holders[0].TTL <= time.Second {
		return outcome(&s, fmt.Errorf("Extend to 1m answered nil, yet the permit has %v left", info.Holders[0].TTL))
	}
	return outcome(&s, nil)
}

func ctlReaderPastWriter(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "rw"
	s.must("r1 reads", acq(ctx, b, rwReq(n, "r1", driver.Read, time.Minute, 0)))
	s.held("w queues to write", acq(ctx, b, rwReq(n, "w", driver.Write, time.Minute, time.Minute)))
	if err := acq(ctx, b, rwReq(n, "r2", driver.Read, time.Minute, time.Minute)); err == nil {
		return outcome(&s, errors.New("a reader was admitted past a writer waiting in line"))
	}
	return outcome(&s, nil)
}

func ctlPermitRenewalToTail(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("a queues", acq(ctx, b, sem(n, "a", 1, time.Minute, time.Minute)))
	s.held("c queues", acq(ctx, b, sem(n, "c", 1, time.Minute, time.Minute)))
	s.held("a renews", acq(ctx, b, sem(n, "a", 1, time.Minute, time.Minute)))
	s.must("h releases", b.Release(ctx, pc(n, "h")))
	if err := acq(ctx, b, sem(n, "c", 1, time.Minute, time.Minute)); err == nil {
		return outcome(&s, errors.New("the second in line took the permit after the first renewed its place"))
	}
	return outcome(&s, nil)
}

func ctlPermitPlacesNeverExpire(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("d queues for 20ms", acq(ctx, b, sem(n, "d", 1, time.Minute, 20*time.Millisecond)))
	gone := pollUntil(time.Second, func() bool {
		info, _ := b.Inspect(ctx, n, driver.Semaphore)
		return info.Waiting == 0
	})
	if !gone {
		return outcome(&s, errors.New("a place kept for 20ms was still in line a second later"))
	}
	return outcome(&s, nil)
}

func ctlPermitEarlyWake(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("w queues", acq(ctx, b, sem(n, "w", 1, time.Minute, time.Minute)))
	s.must("h releases", b.Release(ctx, pc(n, "h")))
	if took := awaitTook(ctx, b, pc(n, "w"), awaitMax); took >= awaitMax*5/6 {
		return outcome(&s, fmt.Errorf("Await after the release that woke it took %v: the wake-up was lost", took))
	}
	return outcome(&s, nil)
}

func ctlReleaseWakesOne(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "rw"
	s.must("w writes", acq(ctx, b, rwReq(n, "w", driver.Write, time.Minute, 0)))
	for _, r := range []string{"r1", "r2", "r3"} {
		s.held(r+" queues to read", acq(ctx, b, rwReq(n, r, driver.Read, time.Minute, time.Minute)))
	}
	s.must("w releases", b.Release(ctx, pc(n, "w")))
	for _, r := range []string{"r1", "r2", "r3"} {
		if took := awaitTook(ctx, b, pc(n, r), awaitMax); took >= awaitMax*5/6 {
			return outcome(&s, fmt.Errorf("reader %s, let in by the writer's release, was not woken (Await took %v)", r, took))
		}
	}
	return outcome(&s, nil)
}

func ctlWriterOwnPrior(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "rw"
	g1, err := b.Acquire(ctx, rwReq(n, "w", driver.Write, time.Minute, 0))
	s.must("w writes", err)
	g2, err := b.Acquire(ctx, rwReq(n, "w", driver.Write, time.Minute, 0))
	s.must("w retries", err)
	if g2.PriorWriter != g1.PriorWriter {
		return outcome(&s, fmt.Errorf("a writer's retry got prior writer %d (its own token %d); the first call got %d", g2.PriorWriter, g2.Token, g1.PriorWriter))
	}
	return outcome(&s, nil)
}

func ctlPermitLeaveWrongPlace(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("a queues", acq(ctx, b, sem(n, "a", 1, time.Minute, time.Minute)))
	s.held("c queues", acq(ctx, b, sem(n, "c", 1, time.Minute, time.Minute)))
	s.must("c leaves", b.Leave(ctx, pc(n, "c")))
	s.must("h releases", b.Release(ctx, pc(n, "h")))
	if err := acq(ctx, b, sem(n, "a", 1, time.Minute, time.Minute)); err != nil {
		return outcome(&s, fmt.Errorf("after the second in line left, the first was refused the free permit (%v): its place was removed", err))
	}
	return outcome(&s, nil)
}

func ctlPermitLeaveFreesHolder(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.must("h leaves the line", b.Leave(ctx, pc(n, "h")))
	if hs := holders(ctx, b, n); len(hs) == 0 {
		return outcome(&s, errors.New("Leave by the holder freed its permit"))
	}
	return outcome(&s, nil)
}

func ctlReadTokensApart(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "rw"
	w, err := b.Acquire(ctx, rwReq(n, "w", driver.Write, time.Minute, 0))
	s.must("w writes", err)
	s.must("w releases", b.Release(ctx, pc(n, "w")))
	r, err := b.Acquire(ctx, rwReq(n, "r", driver.Read, time.Minute, 0))
	s.must("r reads", err)
	if r.Token <= w.Token {
		return outcome(&s, fmt.Errorf("a reader after a writer (token %d) got token %d", w.Token, r.Token))
	}
	return outcome(&s, nil)
}

func ctlInspectNoWaiting(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("a queues", acq(ctx, b, sem(n, "a", 1, time.Minute, time.Minute)))
	if info, _ := b.Inspect(ctx, n, driver.Semaphore); info.Waiting != 1 {
		return outcome(&s, fmt.Errorf("Inspect reported %d waiting with one in line", info.Waiting))
	}
	return outcome(&s, nil)
}

func ctlInspectOneHolder(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	for _, o := range []string{"a", "c", "d"} {
		s.must(o+" takes", acq(ctx, b, sem(n, o, 3, time.Minute, 0)))
	}
	if hs := holders(ctx, b, n); len(hs) != 3 {
		return outcome(&s, fmt.Errorf("Inspect reported holders %q of three", hs))
	}
	return outcome(&s, nil)
}

func ctlLockRenewalToTail(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("h takes", acq(ctx, b, lockReq(n, "h", time.Minute, 0)))
	s.held("a queues", acq(ctx, b, lockReq(n, "a", time.Minute, time.Minute)))
	s.held("c queues", acq(ctx, b, lockReq(n, "c", time.Minute, time.Minute)))
	s.held("a renews", acq(ctx, b, lockReq(n, "a", time.Minute, time.Minute)))
	s.must("h releases", b.Release(ctx, lc(n, "h")))
	if err := acq(ctx, b, lockReq(n, "c", time.Minute, time.Minute)); err == nil {
		return outcome(&s, errors.New("the second in line took the lock after the first renewed its place"))
	}
	return outcome(&s, nil)
}

func ctlLockLeaveWrongPlace(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("h takes", acq(ctx, b, lockReq(n, "h", time.Minute, 0)))
	s.held("a queues", acq(ctx, b, lockReq(n, "a", time.Minute, time.Minute)))
	s.held("c queues", acq(ctx, b, lockReq(n, "c", time.Minute, time.Minute)))
	s.must("c leaves", b.Leave(ctx, lc(n, "c")))
	s.must("h releases", b.Release(ctx, lc(n, "h")))
	if err := acq(ctx, b, lockReq(n, "a", time.Minute, time.Minute)); err != nil {
		return outcome(&s, fmt.Errorf("after the second in line left, the first was refused the free lock (%v): its place was removed", err))
	}
	return outcome(&s, nil)
}

func ctlLockLeaveFreesLock(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("h takes", acq(ctx, b, lockReq(n, "h", time.Minute, 0)))
	s.must("h leaves the line", b.Leave(ctx, lc(n, "h")))
	if info, _ := b.Inspect(ctx, n, driver.Exclusive); len(info.Holders) == 0 {
		return outcome(&s, errors.New("Leave by the holder freed the lock"))
	}
	return outcome(&s, nil)
}

func lockHolder(ctx context.Context, b driver.Backend, name string) (driver.Holder, bool) {
	info, _ := b.Inspect(ctx, name, driver.Exclusive)
	if len(info.Holders) != 1 {
		return driver.Holder{}, false
	}
	return info.Holders[0], true
}

func ctlRefusedSetDropsOwned(ctx context.Context, b driver.Backend) error {
	var s steps
	s.must("o takes c", acq(ctx, b, lockReq("c", "o", time.Minute, 0)))
	s.must("x takes b", acq(ctx, b, lockReq("b", "x", time.Minute, 0)))
	s.held("o's set", acq(ctx, b, driver.Request{Names: []string{"a", "b", "c"}, Owner: "o", TTL: time.Minute, Kind: driver.Exclusive}))
	if h, ok := lockHolder(ctx, b, "c"); !ok || h.Owner != "o" {
		return outcome(&s, errors.New("a refused set dropped the lease its owner held before"))
	}
	return outcome(&s, nil)
}

func ctlSetTokensSorted(ctx context.Context, b driver.Backend) error {
	var s steps
	for range 2 {
		s.must("a taken", acq(ctx, b, lockReq("a", "x", time.Minute, 0)))
		s.must("a released", b.Release(ctx, lc("a", "x")))
	}
	g, err := b.Acquire(ctx, driver.Request{Names: []string{"c", "a"}, Owner: "o", TTL: time.Minute, Kind: driver.Exclusive})
	s.must("the set {c, a}", err)
	hc, _ := lockHolder(ctx, b, "c")
	ha, _ := lockHolder(ctx, b, "a")
	if s.err == nil && !slices.Equal(g.Tokens, []fence.Token{hc.Token, ha.Token}) {
		return outcome(&s, fmt.Errorf("the set {c, a} returned tokens %v; c has %d, a has %d", g.Tokens, hc.Token, ha.Token))
	}
	return outcome(&s, nil)
}

func ctlSetRetryNoRenew(ctx context.Context, b driver.Backend) error {
	var s steps
	set := driver.Request{Names: []string{"a", "b"}, Owner: "o", TTL: time.Second, Kind: driver.Exclusive}
	s.must("the set for 1s", acq(ctx, b, set))
	set.TTL = time.Minute
	s.must("the set again for 1m", acq(ctx, b, set))
	if h, ok := lockHolder(ctx, b, "a"); ok && h.TTL <= time.Second {
		return outcome(&s, fmt.Errorf("a same-owner retry of the set for 1m left %v on its lease", h.TTL))
	}
	return outcome(&s, nil)
}

func ctlSetSeenInParts(ctx context.Context, b driver.Backend) error {
	var s steps
	var seen []string
	if m, ok := b.(*mutant); ok {
		m.step = func() {
			if h, ok := lockHolder(ctx, m.Backend, "a"); ok {
				seen = append(seen, h.Owner)
			}
		}
	}
	s.must("x takes b", acq(ctx, b, lockReq("b", "x", time.Minute, 0)))
	s.held("o's set", acq(ctx, b, driver.Request{Names: []string{"a", "b", "c"}, Owner: "o", TTL: time.Minute, Kind: driver.Exclusive}))
	if len(seen) > 0 {
		return outcome(&s, fmt.Errorf("while o's set was refused, a was seen held by %q", seen))
	}
	return outcome(&s, nil)
}

func ctlSetDropsMetadata(ctx context.Context, b driver.Backend) error {
	var s steps
	s.must("the set with metadata", acq(ctx, b, driver.Request{Names: []string{"a", "b"}, Owner: "o", TTL: time.Minute, Kind: driver.Exclusive, Metadata: "md"}))
	if h, _ := lockHolder(ctx, b, "a"); h.Metadata != "md" {
		return outcome(&s, fmt.Errorf("a set's lease reports metadata %q; want md", h.Metadata))
	}
	return outcome(&s, nil)
}

func ctlResumeTwoSteps(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	old, err := b.Acquire(ctx, lockReq(n, "o", time.Minute, 0))
	s.must("o takes", err)
	var next driver.Grant
	if m, ok := b.(*mutant); ok {
		m.step = func() {
			// Between the resume's two steps, its owner takes the lock anew.
			s.must("o releases", m.Backend.Release(ctx, lc(n, "o")))
			next, err = m.Backend.Acquire(ctx, lockReq(n, "o", time.Minute, 0))
			s.must("o takes again", err)
		}
	}
	g, err := b.Acquire(ctx, driver.Request{Name: n, Owner: "o", TTL: time.Hour, Kind: driver.Exclusive, Resume: true})
	s.must("o resumes for 1h", err)
	h, _ := lockHolder(ctx, b, n)
	if renewed := h.TTL > time.Minute; h.Token != g.Token && renewed || h.Token == g.Token && !renewed {
		return outcome(&s, fmt.Errorf("Resume for 1h returned token %d (the old lease had %d); the lease with token %d has %v left", g.Token, old.Token, next.Token, h.TTL))
	}
	return outcome(&s, nil)
}

func ctlPermitRenewalNoExtend(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("a queues for 300ms", acq(ctx, b, sem(n, "a", 1, time.Minute, 300*time.Millisecond)))
	s.held("c queues", acq(ctx, b, sem(n, "c", 1, time.Minute, time.Minute)))
	start := time.Now()
	for time.Since(start) < 450*time.Millisecond { // past a's first expiry
		s.held("a renews for 300ms", acq(ctx, b, sem(n, "a", 1, time.Minute, 300*time.Millisecond)))
		time.Sleep(10 * time.Millisecond)
	}
	s.must("h releases", b.Release(ctx, pc(n, "h")))
	if err := acq(ctx, b, sem(n, "c", 1, time.Minute, time.Minute)); err == nil {
		return outcome(&s, errors.New("the second in line took the permit ahead of a first that renewed its place every 10ms"))
	}
	return outcome(&s, nil)
}

func ctlPermitAwaitIgnoresCtx(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("w queues", acq(ctx, b, sem(n, "w", 1, time.Minute, time.Minute)))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	if err := b.Await(cctx, pc(n, "w"), 300*time.Millisecond); !errors.Is(err, context.Canceled) {
		return outcome(&s, fmt.Errorf("Await with its context cancelled returned %v after %v", err, time.Since(start)))
	}
	return outcome(&s, nil)
}

func ctlPermitLeaveWakesNobody(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("h takes", acq(ctx, b, sem(n, "h", 1, time.Minute, 0)))
	s.held("a queues", acq(ctx, b, sem(n, "a", 1, time.Minute, time.Minute)))
	s.held("c queues", acq(ctx, b, sem(n, "c", 1, time.Minute, time.Minute)))
	s.must("h releases", b.Release(ctx, pc(n, "h")))
	_ = b.Await(ctx, pc(n, "c"), 0) // c takes the release's wake-up, if it had one
	s.must("a leaves the free permit's line", b.Leave(ctx, pc(n, "a")))
	if took := awaitTook(ctx, b, pc(n, "c"), awaitMax); took >= awaitMax*5/6 {
		return outcome(&s, fmt.Errorf("the waiter behind a first in line that left the free permit was not woken (Await took %v)", took))
	}
	return outcome(&s, nil)
}

// The existing mutants whose kinds the issue lists, with their controls.

func ctlLockEarlyWake(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("h takes", acq(ctx, b, lockReq(n, "h", time.Minute, 0)))
	s.held("w queues", acq(ctx, b, lockReq(n, "w", time.Minute, time.Minute)))
	s.must("h releases", b.Release(ctx, lc(n, "h")))
	if took := awaitTook(ctx, b, lc(n, "w"), awaitMax); took >= awaitMax*5/6 {
		return outcome(&s, fmt.Errorf("Await after the release that woke it took %v: the wake-up was lost", took))
	}
	return outcome(&s, nil)
}

func ctlSemaphoreOverLimit(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "sem"
	s.must("a takes", acq(ctx, b, sem(n, "a", 1, time.Minute, 0)))
	if err := acq(ctx, b, sem(n, "c", 1, time.Minute, 0)); err == nil {
		return outcome(&s, errors.New("a semaphore of 1 admitted a second holder"))
	}
	return outcome(&s, nil)
}

func ctlSetPartial(ctx context.Context, b driver.Backend) error {
	var s steps
	s.must("x takes b", acq(ctx, b, lockReq("b", "x", time.Minute, 0)))
	s.held("o's set", acq(ctx, b, driver.Request{Names: []string{"a", "b"}, Owner: "o", TTL: time.Minute, Kind: driver.Exclusive}))
	if h, ok := lockHolder(ctx, b, "a"); ok {
		return outcome(&s, fmt.Errorf("a refused set left a held by %q", h.Owner))
	}
	return outcome(&s, nil)
}

func ctlLockOrder(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("h takes", acq(ctx, b, lockReq(n, "h", time.Minute, 0)))
	s.held("a queues", acq(ctx, b, lockReq(n, "a", time.Minute, time.Minute)))
	s.held("c queues", acq(ctx, b, lockReq(n, "c", time.Minute, time.Minute)))
	s.must("h releases", b.Release(ctx, lc(n, "h")))
	if err := acq(ctx, b, lockReq(n, "c", time.Minute, time.Minute)); err == nil {
		return outcome(&s, errors.New("the second in line took the lock ahead of the first"))
	}
	return outcome(&s, nil)
}

func ctlResumeExpired(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("o takes for 20ms", acq(ctx, b, lockReq(n, "o", 20*time.Millisecond, 0)))
	pollUntil(time.Second, func() bool { _, held := lockHolder(ctx, b, n); return !held })
	if _, err := b.Acquire(ctx, driver.Request{Name: n, Owner: "o", TTL: time.Minute, Kind: driver.Exclusive, Resume: true}); err == nil {
		return outcome(&s, errors.New("Resume of an expired lease succeeded"))
	}
	return outcome(&s, nil)
}

func ctlLockPlacesNeverExpire(ctx context.Context, b driver.Backend) error {
	var s steps
	n := "l"
	s.must("h takes", acq(ctx, b, lockReq(n, "h", time.Minute, 0)))
	s.held("d queues for 20ms", acq(ctx, b, lockReq(n, "d", time.Minute, 20*time.Millisecond)))
	gone := pollUntil(time.Second, func() bool {
		info, _ := b.Inspect(ctx, n, driver.Exclusive)
		return info.Waiting == 0
	})
	if !gone {
		return outcome(&s, errors.New("a place kept for 20ms was still in line a second later"))
	}
	return outcome(&s, nil)
}

// mutants are the bugs the checks of permits, sets, resume and queued
// waiting must catch, each with its control and the checks that catch it.
var mutants = []struct {
	kind    string // the bug, in words
	name    string
	backend func() driver.Backend
	control func(context.Context, driver.Backend) error
	caught  []string // checks that must fail on it
	racy    bool     // caught by a check that makes a race happen: repeated until caught
}{
	{"a release answered ErrNotHeld (double release) that still frees a slot", "releaseTwiceFreesSlot",
		mut(releaseTwiceFreesSlot), ctlReleaseTwice, []string{"Permits/PermitNotHeldChangesNothing"}, false},
	{"a release answered ErrNotHeld (release after expiry) that still frees a slot", "releaseExpiredFreesSlot",
		mut(releaseExpiredFreesSlot), ctlReleaseExpired, []string{"Permits/PermitNotHeldChangesNothing"}, false},
	{"ExtendPermit reviving an expired permit", "extendRevivesExpired",
		mut(extendRevivesExpired), ctlExtendRevives, []string{"Permits/PermitNotHeldChangesNothing"}, false},
	{"ExtendPermit that answers nil and renews nothing", "extendNoRenew",
		mut(extendNoRenew), ctlExtendNoRenew, []string{"Permits/PermitExtendNeverRecreates"}, false},
	{"a reader admitted past a queued writer", "readerPastQueuedWriter",
		mut(readerPastQueuedWriter), ctlReaderPastWriter, []string{"Permits/RWWriterNotStarvedByReaders"}, false},
	{"a permit place renewal that moves a waiter to the tail", "permitRenewalToTail",
		mut(permitRenewalToTail), ctlPermitRenewalToTail, []string{"Permits/PermitRenewalKeepsPlace"}, false},
	{"permit places that never expire", "permitPlacesNeverExpire",
		mut(permitPlacesNeverExpire), ctlPermitPlacesNeverExpire, []string{"Permits/PermitSkipsDeadWaiter"}, false},
	{"a permit wake-up sent before the wait began and lost", "permitDropsEarlyWake",
		mut(permitDropsEarlyWake), ctlPermitEarlyWake, []string{"Permits/PermitKeepsEarlyWakeUp"}, false},
	{"a writer's release that wakes only one of several queued readers", "releaseWakesOne",
		mut(releaseWakesOne), ctlReleaseWakesOne, []string{"Permits/RWWriterReleaseWakesAllReaders"}, false},
	{"a retried writer reporting itself as its own prior writer", "writerRetryOwnPrior",
		mut(writerRetryOwnPrior), ctlWriterOwnPrior, []string{"Permits/PermitSameOwnerKeepsToken"}, false},
	{"LeavePermitLine removing the wrong place", "permitLeaveWrongPlace",
		mut(permitLeaveWrongPlace), ctlPermitLeaveWrongPlace, []string{"Permits/PermitLeaveLine"}, false},
	{"LeavePermitLine by the holder freeing its permit", "permitLeaveFreesHolder",
		mut(permitLeaveFreesHolder), ctlPermitLeaveFreesHolder, []string{"Permits/PermitLeaveLine"}, false},
	{"permit tokens not rising across kinds", "readTokensApart",
		mut(readTokensApart), ctlReadTokensApart, []string{"Permits/RWTokensRiseAcrossKinds"}, false},
	{"Inspect of permits hiding the waiters", "permitInspectNoWaiting",
		mut(permitInspectNoWaiting), ctlInspectNoWaiting, []string{"Permits/PermitLeaveLine"}, false},
	{"Inspect of permits hiding holders", "permitInspectOneHolder",
		mut(permitInspectOneHolder), ctlInspectOneHolder, []string{"Permits/SemaphoreGrantsAtMostLimit"}, false},
	{"a permit place renewal that keeps the place's first expiry", "permitRenewalNoExtend",
		mut(permitRenewalNoExtend), ctlPermitRenewalNoExtend, []string{"Permits/PermitSkipsDeadWaiter"}, false},
	{"Await of a permit deaf to its context", "permitAwaitIgnoresCtx",
		mut(permitAwaitIgnoresCtx), ctlPermitAwaitIgnoresCtx, []string{"Permits/PermitAwaitHonoursContext"}, false},
	{"LeavePermitLine of the first in line waking nobody", "permitLeaveWakesNobody",
		mut(permitLeaveWakesNobody), ctlPermitLeaveWakesNobody, []string{"Permits/PermitWakesBeforeRenewal"}, false},
	{"a semaphore admitting limit+1", "overLimit",
		func() driver.Backend {
			return &flawedPermits{Backend: memory.NewBackend(), f: permitFlaws{overLimit: true}}
		},
		ctlSemaphoreOverLimit, []string{"Permits/SemaphoreGrantsAtMostLimit", "Permits/SemaphoreNeverOverLimitUnderContention"}, false},

	{"a lock place renewal that moves a waiter to the tail", "lockRenewalToTail",
		mut(lockRenewalToTail), ctlLockRenewalToTail, []string{"QueuePlaceIsIdempotent"}, false},
	{"Leave of a lock place removing the wrong place", "lockLeaveWrongPlace",
		mut(lockLeaveWrongPlace), ctlLockLeaveWrongPlace, []string{"QueuePlaceIsIdempotent"}, false},
	{"Leave by the lock holder freeing the lock", "lockLeaveFreesLock",
		mut(lockLeaveFreesLock), ctlLockLeaveFreesLock, []string{"QueuePlaceIsIdempotent"}, false},
	{"a lock wake-up sent before the wait began and lost", "lockDropsEarlyWake",
		func() driver.Backend { return &flawedQueue{memory.NewBackend(), queueFlaws{dropsEarlyWake: true}} },
		ctlLockEarlyWake, []string{"QueueKeepsEarlyWakeUp"}, false},
	{"lock places that never expire", "lockPlacesNeverExpire",
		func() driver.Backend { return &flawedQueue{memory.NewBackend(), queueFlaws{placesNeverExpire: true}} },
		ctlLockPlacesNeverExpire, []string{"QueueSkipsDeadWaiter", "QueueInspectReportsWaiting"}, false},
	{"queue places served out of order", "lifo",
		func() driver.Backend { return &lifoQueue{Backend: memory.NewBackend(), stacks: map[string][]string{}} },
		ctlLockOrder, []string{"QueueServesInArrivalOrder"}, false},

	{"a refused set that also drops leases the owner held before", "refusedSetDropsOwned",
		mut(refusedSetDropsOwned), ctlRefusedSetDropsOwned, []string{"Multi/SetAllOrNothing"}, false},
	{"set tokens returned in sorted rather than the caller's order", "setTokensSorted",
		mut(setTokensSorted), ctlSetTokensSorted, []string{"Multi/SetAllOrNothing"}, false},
	{"a same-owner set retry that does not renew", "setRetryNoRenew",
		mut(setRetryNoRenew), ctlSetRetryNoRenew, []string{"Multi/SetAllOrNothing"}, false},
	{"a bystander seeing part of a refused set held", "setSeenInParts",
		mut(setSeenInParts), ctlSetSeenInParts, []string{"Multi/SetBystanderSeesNoPart"}, true},
	{"a set that stores no metadata", "setDropsMetadata",
		mut(setDropsMetadata), ctlSetDropsMetadata, []string{"Multi/SetAllOrNothing"}, false},
	{"a set granted partially", "setPartial",
		func() driver.Backend { return &flawedMulti{Backend: memory.NewBackend(), f: multiFlaws{partial: true}} },
		ctlSetPartial, []string{"Multi/SetAllOrNothing", "Multi/MultiAllOrNothing"}, false},

	{"a Resume of two steps that renews a replacing lease but returns the old token", "resumeTwoSteps",
		mut(resumeTwoSteps), ctlResumeTwoSteps, []string{"ResumeIsOneStep"}, true},
	{"a Resume of two steps that renews the old lease but returns the replacing one's token", "resumeRenewThenRead",
		mut(resumeRenewThenRead), ctlResumeTwoSteps, []string{"ResumeIsOneStep"}, true},
	{"a resume of an expired lease succeeding", "resumeExpired",
		func() driver.Backend {
			return &flawedResumer{Backend: memory.NewBackend(), f: resumeFlaws{asAcquire: true}}
		},
		ctlResumeExpired, []string{"ResumeExpiredIsNotHeld"}, false},
}

func mut(b bug) func() driver.Backend { return func() driver.Backend { return newMutant(b) } }

// mutantAttempts bounds how often a racy mutant's check is repeated: the
// check makes the race happen many times a run, so one run nearly always
// catches it.
const mutantAttempts = 5

// TestMutantsAreCaught: each mutant misbehaves (its control, run on it,
// sees the bug, and run on the memory backend sees none), and every check
// named for it fails on it. The mutants run side by side, as the checks
// mostly wait.
func TestMutantsAreCaught(t *testing.T) {
	type result struct {
		onMutant, onMemory error
		checks             map[string]error
	}
	results := make([]result, len(mutants))
	var wg sync.WaitGroup
	for i, m := range mutants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), drivertest.Timeout)
			defer cancel()
			r := result{checks: map[string]error{}}
			r.onMutant = m.control(ctx, m.backend())
			r.onMemory = m.control(ctx, memory.NewBackend())
			for _, name := range m.caught {
				for range mutantAttempts {
					if r.checks[name] = runCheck(checkNamed(name), m.backend()); r.checks[name] != nil || !m.racy {
						break
					}
				}
			}
			results[i] = r
		}()
	}
	wg.Wait()
	for i, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			r := results[i]
			switch {
			case errors.Is(r.onMutant, errSetup) || errors.Is(r.onMemory, errSetup):
				t.Fatalf("control of %q: %v / on memory: %v", m.kind, r.onMutant, r.onMemory)
			case r.onMutant == nil:
				t.Fatalf("control: the mutant with %q behaved", m.kind)
			case r.onMemory != nil:
				t.Fatalf("control on the correct memory backend: %v", r.onMemory)
			}
			t.Logf("control: %v", r.onMutant)
			for _, name := range m.caught {
				if err := r.checks[name]; err == nil {
					t.Errorf("%s passed a backend with %s", name, m.kind)
				} else {
					t.Logf("%s: %v", name, firstLine(err))
				}
			}
		})
	}
}

// TestMutantWrapperIsCorrect: the mutant's wrapper with no bug passes every
// check a mutant is caught by, so that what fails on a mutant is its bug.
func TestMutantWrapperIsCorrect(t *testing.T) {
	var names []string
	for _, m := range mutants {
		for _, n := range m.caught {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slots := make(chan struct{}, 2*runtime.GOMAXPROCS(0))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			errs[i] = runCheck(checkNamed(n), newMutant(correct))
		}()
	}
	wg.Wait()
	for i, n := range names {
		if errs[i] != nil {
			t.Errorf("%s failed on the mutant wrapper without a bug: %v", n, errs[i])
		}
	}
}
