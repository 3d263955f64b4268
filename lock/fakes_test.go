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
	lock.Backend
	stuckExtend, stuckRelease atomic.Bool
	extendReply               func() error // set before the first call

	entered  chan string // "extend" or "release", when a stuck call starts
	returned chan string // the same, when a stuck call returns
	unstuck  chan struct{}
	once     sync.Once
}

func newStuckBackend(t *testing.T, b lock.Backend) *stuckBackend {
	s := &stuckBackend{Backend: b, entered: make(chan string, 16), returned: make(chan string, 16), unstuck: make(chan struct{})}
	t.Cleanup(s.unstick)
	return s
}

func (s *stuckBackend) unstick() { s.once.Do(func() { close(s.unstuck) }) }

func (s *stuckBackend) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	if !s.stuckExtend.Load() {
		return s.Backend.Extend(ctx, name, owner, ttl)
	}
	s.entered <- "extend"
	<-s.unstuck
	defer func() { s.returned <- "extend" }()
	if s.extendReply != nil {
		return s.extendReply()
	}
	return s.Backend.Extend(context.Background(), name, owner, ttl)
}

func (s *stuckBackend) Release(ctx context.Context, name, owner string) error {
	if !s.stuckRelease.Load() {
		return s.Backend.Release(ctx, name, owner)
	}
	s.entered <- "release"
	<-s.unstuck
	defer func() { s.returned <- "release" }()
	return s.Backend.Release(context.Background(), name, owner)
}

// recorder collects the events an Observer sees.
type recorder struct {
	mu     sync.Mutex
	events []lock.Event
}

func (r *recorder) observe(e lock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// of returns the events of kind k seen so far.
func (r *recorder) of(k lock.EventKind) []lock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lock.Event
	for _, e := range r.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// kinds returns the kinds of all events seen so far, in order.
func (r *recorder) kinds() []lock.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lock.EventKind
	for _, e := range r.events {
		out = append(out, e.Kind)
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
	lock.Backend
	inFlight   atomic.Int64
	overlapped atomic.Bool
	releases   atomic.Int64
}

func (s *slowAcquire) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if _, err := s.Backend.Acquire(context.Background(), name, owner, ttl); err != nil {
		return 0, err
	}
	<-ctx.Done()
	return 0, fmt.Errorf("read: %w", ctx.Err())
}

func (s *slowAcquire) Release(ctx context.Context, name, owner string) error {
	s.releases.Add(1)
	if s.inFlight.Load() != 0 {
		s.overlapped.Store(true)
	}
	return s.Backend.Release(ctx, name, owner)
}
