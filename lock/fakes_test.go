package lock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// waitLimit bounds every wait in these tests: generous, because the machine
// is shared, and only ever reached when the code under test is broken.
const waitLimit = 10 * time.Second

// stuckBackend wraps a backend. While a call is marked stuck it ignores its
// context and blocks until the test unsticks it (or ends), like a backend
// client that does not honour context deadlines (go-redis with its default
// ContextTimeoutEnabled=false). reply, when set, replaces the wrapped call's
// answer once unstuck.
type stuckBackend struct {
	driver.Backend
	stuckExtend, stuckRelease atomic.Bool
	extendReply               func() error // set before the first call

	entered  chan string // "extend" or "release", when a stuck call starts
	returned chan string // the same, when a stuck call returns
	unstuck  chan struct{}
	once     sync.Once
}

func newStuckBackend(t *testing.T, b driver.Backend) *stuckBackend {
	s := &stuckBackend{Backend: b, entered: make(chan string, 16), returned: make(chan string, 16), unstuck: make(chan struct{})}
	t.Cleanup(s.unstick)
	return s
}

func (s *stuckBackend) unstick() { s.once.Do(func() { close(s.unstuck) }) }

func (s *stuckBackend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if !s.stuckExtend.Load() {
		return s.Backend.Extend(ctx, c, ttl)
	}
	s.entered <- "extend"
	<-s.unstuck
	defer func() { s.returned <- "extend" }()
	if s.extendReply != nil {
		return s.extendReply()
	}
	return s.Backend.Extend(context.Background(), c, ttl)
}

func (s *stuckBackend) Release(ctx context.Context, c driver.Claim) error {
	if !s.stuckRelease.Load() {
		return s.Backend.Release(ctx, c)
	}
	s.entered <- "release"
	<-s.unstuck
	defer func() { s.returned <- "release" }()
	return s.Backend.Release(context.Background(), c)
}

// observeAll returns an Observer whose every field calls f with the kind
// of event it hears of: "acquired", "extended", "released", "lost",
// "stale", "renewal-failed" or "retrying" (SlogObserver's names).
func observeAll(f func(kind string, e lock.Event)) *lock.Observer {
	return &lock.Observer{
		Acquired:      func(e lock.Event) { f("acquired", e) },
		Extended:      func(e lock.Event) { f("extended", e) },
		Released:      func(e lock.Event) { f("released", e) },
		Lost:          func(e lock.Event) { f("lost", e) },
		Stale:         func(e lock.Event) { f("stale", e) },
		RenewalFailed: func(e lock.Event) { f("renewal-failed", e) },
		Retrying:      func(e lock.Event) { f("retrying", e) },
	}
}

// recorder collects the events an Observer sees, with their kinds.
type recorder struct {
	mu     sync.Mutex
	events []recorded
}

// recorded is one event a recorder saw.
type recorded struct {
	kind string
	lock.Event
}

// observer returns an Observer that records every event into r.
func (r *recorder) observer() *lock.Observer { return observeAll(r.observe) }

func (r *recorder) observe(kind string, e lock.Event) {
	r.mu.Lock()
	r.events = append(r.events, recorded{kind, e})
	r.mu.Unlock()
}

// of returns the events of the kind seen so far.
func (r *recorder) of(kind string) []lock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lock.Event
	for _, e := range r.events {
		if e.kind == kind {
			out = append(out, e.Event)
		}
	}
	return out
}

// kinds returns the kinds of all events seen so far, in order.
func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.kind)
	}
	return out
}

// await fails the test unless ch delivers within waitLimit.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s: nothing within %v", what, waitLimit)
		panic("unreachable")
	}
}

// eventually polls cond until it holds, failing the test after waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitLimit)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// run calls f in a goroutine and returns a channel with its result.
func run(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// slowAcquire takes the lock, then holds its reply until the caller's
// context has ended and reports a timeout: an attempt whose outcome the
// caller cannot know. It records whether a Release ever overlapped an
// Acquire still in flight.
type slowAcquire struct {
	driver.Backend
	inFlight   atomic.Int64
	overlapped atomic.Bool
	releases   atomic.Int64
}

func (s *slowAcquire) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if _, err := s.Backend.Acquire(context.Background(), req); err != nil {
		return driver.Grant{}, err
	}
	<-ctx.Done()
	return driver.Grant{}, fmt.Errorf("read: %w", ctx.Err())
}

func (s *slowAcquire) Release(ctx context.Context, c driver.Claim) error {
	s.releases.Add(1)
	if s.inFlight.Load() != 0 {
		s.overlapped.Store(true)
	}
	return s.Backend.Release(ctx, c)
}

// polling is the QueueOptions of a Client that polls instead of waiting in
// line. Before the driver contract, the fakes here that wrapped a backend
// (faultyBackend and the like) hid its queued waiting, and Acquire polled
// them; a test that counts attempts or times a retry loop over such a fake
// keeps running the loop it was written for. Queued waiting has tests of
// its own (queue_test.go).
var polling = lock.QueueOptions{Polling: true}

// takeLock has owner take the lock called name on b for ttl, straight on the
// driver (no Client): another process holding the lock.
func takeLock(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
	return g.Token, err
}

// releaseLock has owner release the lock called name on b, straight on the
// driver: an operator's force-release, or the other process letting go.
func releaseLock(ctx context.Context, b driver.Backend, name, owner string) error {
	return b.Release(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive})
}

// lockState is the lock called name as its driver reports it, with its one
// holder's fields at the top: what these tests ask of a lock.
type lockState struct {
	Held     bool
	Owner    string
	Token    fence.Token
	TTL      time.Duration
	Metadata string
	Waiting  int
}

// inspectLock asks b about the lock called name, straight on the driver.
func inspectLock(ctx context.Context, b driver.Backend, name string) (lockState, error) {
	info, err := b.Inspect(ctx, name, driver.Exclusive)
	if err != nil {
		return lockState{}, err
	}
	s := lockState{Waiting: info.Waiting}
	if len(info.Holders) > 0 {
		h := info.Holders[0]
		s.Held, s.Owner, s.Token, s.TTL, s.Metadata = true, h.Owner, h.Token, h.TTL, h.Metadata
	}
	return s, nil
}
