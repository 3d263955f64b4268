package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// The promise of sets over a backend that takes them name by name: a caller
// never holds a name of its set while it waits for another, whatever fails
// in a pass (lock/multi_acquire.go). These tests break passes in every way
// one can end (a transient error, an error after the acquire applied, a
// release that fails, the context) and watch the backend for a caller that
// gets in line or waits while it still holds a name.

// oneByOne is a memory backend that cannot take a set in one step: it
// answers driver.ErrNotAtomic to every set, so that the Client takes the
// names one by one. It watches the promise of sets: a caller that gets in
// line or waits for a name (an Acquire with a place, or Await) while it
// holds another watched name breaks it, and so, when passStart is set (a
// polling Client, which holds no turn between passes), does a caller that
// starts a pass (an Acquire of the first watched name without a place)
// while it holds a watched name. onAcquire and onRelease, when set, may
// answer a request in the backend's place.
type oneByOne struct {
	*memory.Backend
	watched   []string // sorted
	passStart bool

	mu        sync.Mutex
	breaches  []string
	onAcquire func(driver.Request) (driver.Grant, error, bool)
	onRelease func(driver.Claim) (error, bool)
}

func newOneByOne(watched ...string) *oneByOne {
	slices.Sort(watched)
	return &oneByOne{Backend: memory.NewBackend(), watched: watched}
}

func (b *oneByOne) setAcquire(f func(driver.Request) (driver.Grant, error, bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onAcquire = f
}

func (b *oneByOne) setRelease(f func(driver.Claim) (error, bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onRelease = f
}

// check records a breach when owner holds a watched name other than except
// while it does what.
func (b *oneByOne) check(owner, except, what string) {
	for _, n := range b.watched {
		if n == except {
			continue
		}
		if info, err := inspectLock(context.Background(), b.Backend, n); err == nil && info.Held && info.Owner == owner {
			b.mu.Lock()
			b.breaches = append(b.breaches, fmt.Sprintf("%s while holding %q", what, n))
			b.mu.Unlock()
		}
	}
}

// breached reports whether a caller broke the promise.
func (b *oneByOne) breached() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.breaches) > 0
}

// expectNoBreach fails the test if a caller waited while it held a name.
func (b *oneByOne) expectNoBreach(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.breaches) > 0 {
		t.Fatalf("a caller of the set held a name while it waited for another: %q", b.breaches)
	}
}

func (b *oneByOne) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, fmt.Errorf("%w: a set of %d names", driver.ErrNotAtomic, len(req.Names))
	}
	switch {
	case req.Place > 0:
		b.check(req.Owner, req.Name, fmt.Sprintf("got in line for %q", req.Name))
	case b.passStart && req.Name == b.watched[0]:
		b.check(req.Owner, "", fmt.Sprintf("began a pass at %q", req.Name))
	}
	b.mu.Lock()
	f := b.onAcquire
	b.mu.Unlock()
	if f != nil {
		if g, err, handled := f(req); handled {
			return g, err
		}
	}
	return b.Backend.Acquire(ctx, req)
}

func (b *oneByOne) Release(ctx context.Context, c driver.Claim) error {
	b.mu.Lock()
	f := b.onRelease
	b.mu.Unlock()
	if f != nil {
		if err, handled := f(c); handled {
			return err
		}
	}
	return b.Backend.Release(ctx, c)
}

func (b *oneByOne) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	b.check(c.Owner, c.Name, fmt.Sprintf("waited for %q", c.Name))
	return b.Backend.Await(ctx, c, max)
}

var errReset = driver.Transient(errors.New("connection reset by peer"))

// acquireMultiInBackground runs c.AcquireMulti of names in a goroutine;
// the test's end cancels it and waits for it.
func acquireMultiInBackground(t *testing.T, c *lock.Client, names []string, ttl time.Duration) <-chan *lock.MultiLease {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan *lock.MultiLease, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		set, err := c.AcquireMulti(ctx, names, ttl)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("AcquireMulti(%q) = %v", names, err)
			}
			return
		}
		got <- set
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return got
}

// TestAcquireMultiLetsGoOfItsTurnAfterAFailedPass is the case: the
// caller's turn in line takes b, taking a next fails (with a transient error
// that changed nothing, or after the acquire applied), and another caller
// takes a meanwhile. The caller must let go of b before it gets in line for
// a, so that a caller of b (or of {b, a}) is not held up for its TTL.
func TestAcquireMultiLetsGoOfItsTurnAfterAFailedPass(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			ctx := context.Background()
			b := newOneByOne("a", "b")
			if _, err := takeLock(ctx, b.Backend, "b", "x", time.Minute); err != nil {
				t.Fatal(err)
			}
			c := lock.New(b, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
			got := acquireMultiInBackground(t, c, []string{"b", "a"}, time.Minute)
			eventually(t, "the caller in line for b", func() bool { return len(b.Waiting("b")) == 1 })

			var fired atomic.Bool
			b.setAcquire(func(req driver.Request) (driver.Grant, error, bool) {
				if req.Name != "a" || req.Place > 0 || req.Owner == "y" || !fired.CompareAndSwap(false, true) {
					return driver.Grant{}, nil, false
				}
				if !applied {
					// The connection drops before the request is sent,
					// and y takes a meanwhile.
					if _, err := takeLock(ctx, b.Backend, "a", "y", time.Minute); err != nil {
						t.Error(err)
					}
					return driver.Grant{}, errReset, true
				}
				// The acquire applies, its reply is lost.
				if _, err := b.Backend.Acquire(ctx, req); err != nil {
					t.Error(err)
				}
				return driver.Grant{}, errReset, true
			})
			if applied {
				// y takes a as soon as the caller lets go of it.
				var took atomic.Bool
				b.setRelease(func(cl driver.Claim) (error, bool) {
					err := b.Backend.Release(ctx, cl)
					if cl.Name == "a" && err == nil && took.CompareAndSwap(false, true) {
						if _, err := takeLock(ctx, b.Backend, "a", "y", time.Minute); err != nil {
							t.Error(err)
						}
					}
					return err, true
				})
			}
			if err := releaseLock(ctx, b.Backend, "b", "x"); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the caller in line for a", func() bool { return len(b.Waiting("a")) == 1 })
			b.expectNoBreach(t)
			if !fired.Load() {
				t.Fatal("the fault never fired")
			}
			// Nothing holds b: a caller of b alone takes it at once.
			other := lock.New(b.Backend, nil)
			lb, err := other.TryAcquire(ctx, "b", time.Minute)
			if err != nil {
				t.Fatalf("TryAcquire(b) while the set's caller waits for a = %v; want b free", err)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Once y lets go of a, the caller gets the whole set.
			if err := releaseLock(ctx, b.Backend, "a", "y"); err != nil {
				t.Fatal(err)
			}
			set := await(t, got, "AcquireMulti's set")
			if set.Token("a") == 0 || set.Token("b") == 0 {
				t.Fatalf("tokens %d, %d; want both", set.Token("a"), set.Token("b"))
			}
			if err := set.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b.expectNoBreach(t)
		})
	}
}

// TestAcquireMultiConfirmsReleasesBeforeWaiting: the pass takes a, finds b
// held and lets a go, but the release fails. The caller must not get in
// line for b while it may still hold a: it releases a again until the
// backend confirms it (released, or not held: a release whose reply was
// lost after it applied).
func TestAcquireMultiConfirmsReleasesBeforeWaiting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		applied bool // the failing release applied, its reply was lost
	}{{"refused", false}, {"replyLost", true}} {
		for _, polling := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/polling=%v", tc.name, polling), func(t *testing.T) {
				ctx := context.Background()
				b := newOneByOne("a", "b")
				b.passStart = polling
				if _, err := takeLock(ctx, b.Backend, "b", "x", time.Minute); err != nil {
					t.Fatal(err)
				}
				var healed atomic.Bool
				var failures atomic.Int64
				b.setRelease(func(cl driver.Claim) (error, bool) {
					if cl.Name != "a" || cl.Owner == "x" || healed.Load() {
						return nil, false
					}
					failures.Add(1)
					if tc.applied {
						if err := b.Backend.Release(ctx, cl); err != nil && !errors.Is(err, lock.ErrNotHeld) {
							t.Error(err)
						}
						healed.Store(true) // one lost reply
					}
					return errReset, true
				})
				c := lock.New(b, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Queue: lock.QueueOptions{Polling: polling}})
				got := acquireMultiInBackground(t, c, []string{"a", "b"}, time.Minute)
				if tc.applied {
					eventually(t, "the lost reply of a's release", func() bool { return failures.Load() >= 1 })
				} else {
					// The backend refuses every release of a for a while:
					// the caller keeps trying, and stays out of line.
					eventually(t, "three failed releases of a", func() bool { return failures.Load() >= 3 || b.breached() })
					b.expectNoBreach(t)
					if !polling && len(b.Waiting("b")) != 0 {
						t.Fatal("the caller got in line for b while its release of a was unconfirmed")
					}
					healed.Store(true)
				}
				if polling {
					eventually(t, "a released", func() bool {
						info, err := inspectLock(ctx, b.Backend, "a")
						return err == nil && !info.Held
					})
				} else {
					eventually(t, "the caller in line for b", func() bool { return len(b.Waiting("b")) == 1 })
					expectFree(t, b.Backend, "a")
				}
				b.expectNoBreach(t)
				if err := releaseLock(ctx, b.Backend, "b", "x"); err != nil {
					t.Fatal(err)
				}
				set := await(t, got, "AcquireMulti's set")
				if err := set.Release(ctx); err != nil {
					t.Fatal(err)
				}
				b.expectNoBreach(t)
			})
		}
	}
}

// TestTryAcquireMultiRetriesAFailedRelease: TryAcquireMulti finds b held
// and lets a go, but that release fails once. It still returns at once, and
// a is released soon after, not left held for its TTL.
func TestTryAcquireMultiRetriesAFailedRelease(t *testing.T) {
	ctx := context.Background()
	b := newOneByOne("a", "b")
	if _, err := takeLock(ctx, b.Backend, "b", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	b.setRelease(func(cl driver.Claim) (error, bool) {
		if cl.Name == "a" && failed.CompareAndSwap(false, true) {
			return errReset, true
		}
		return nil, false
	})
	_, err := lock.New(b, nil).TryAcquireMulti(ctx, []string{"a", "b"}, time.Minute)
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryAcquireMulti = %v; want ErrHeld", err)
	}
	eventually(t, "a released after its failed release", func() bool {
		info, err := inspectLock(ctx, b.Backend, "a")
		return err == nil && !info.Held
	})
}

// TestAcquireMultiGivingUpMidPassRetriesReleases: the context ends while a
// pass is taking b (the acquire applies, its reply never comes), after a
// was taken; the releases of a fail twice. AcquireMulti returns, and a and
// b are released soon after, not left held for their TTL.
func TestAcquireMultiGivingUpMidPassRetriesReleases(t *testing.T) {
	ctx := context.Background()
	b := newOneByOne("a", "b")
	var failures atomic.Int64
	b.setRelease(func(cl driver.Claim) (error, bool) {
		if cl.Name == "a" && failures.Add(1) <= 2 {
			return errReset, true
		}
		return nil, false
	})
	stuck := &stuckOn{oneByOne: b, name: "b", in: make(chan struct{})}
	callCtx, cancel := context.WithCancel(ctx)
	done := run(func() error {
		_, err := lock.New(stuck, nil).AcquireMulti(callCtx, []string{"a", "b"}, time.Minute)
		return err
	})
	await(t, stuck.in, "the pass taking b")
	cancel()
	if err := await(t, done, "AcquireMulti's return"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireMulti = %v; want ErrNotAcquired and Canceled", err)
	}
	for _, n := range []string{"a", "b"} {
		eventually(t, n+" released after the call gave up", func() bool {
			info, err := inspectLock(ctx, b.Backend, n)
			return err == nil && !info.Held
		})
	}
}

// stuckOn is a oneByOne whose acquires of name, once the backend took
// them, close in (the first time) and wait for the caller's context to end,
// and report that: the reply never came.
type stuckOn struct {
	*oneByOne
	name string
	in   chan struct{}
	once sync.Once
}

func (s *stuckOn) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := s.oneByOne.Acquire(ctx, req)
	if req.Name != s.name || err != nil {
		return g, err
	}
	s.once.Do(func() { close(s.in) })
	<-ctx.Done()
	return driver.Grant{}, fmt.Errorf("read: %w", ctx.Err())
}

// TestAcquireMultiWaitsOutAnUnconfirmedRelease: the backend refuses every
// release of a. The caller cannot confirm that it let a go, so it gets in
// line for b only once a's lease has run out on the backend, never while it
// may still hold a.
func TestAcquireMultiWaitsOutAnUnconfirmedRelease(t *testing.T) {
	ctx := context.Background()
	b := newOneByOne("a", "b")
	if _, err := takeLock(ctx, b.Backend, "b", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	var healed atomic.Bool
	var failures atomic.Int64
	b.setRelease(func(cl driver.Claim) (error, bool) {
		if cl.Name != "a" || healed.Load() {
			return nil, false
		}
		failures.Add(1)
		return errReset, true
	})
	c := lock.New(b, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	got := acquireMultiInBackground(t, c, []string{"a", "b"}, 300*time.Millisecond)
	eventually(t, "the caller in line for b, a's lease run out", func() bool { return len(b.Waiting("b")) == 1 || b.breached() })
	b.expectNoBreach(t)
	if failures.Load() < 2 {
		t.Fatalf("%d failed releases of a; want it retried", failures.Load())
	}
	expectFree(t, b.Backend, "a")
	healed.Store(true)
	if err := releaseLock(ctx, b.Backend, "b", "x"); err != nil {
		t.Fatal(err)
	}
	set := await(t, got, "AcquireMulti's set")
	if err := set.Release(ctx); err != nil && !errors.Is(err, lock.ErrLost) {
		t.Fatal(err)
	}
	b.expectNoBreach(t)
}

// TestAcquireMultiGivesUpWhenReleasesGoUnanswered: every release fails and
// the TTL is long: the caller gives up after Options.MaxUnreachable,
// without ever getting in line while it may hold a, and goes on releasing a
// in the background, so that a is free soon after the backend answers.
func TestAcquireMultiGivesUpWhenReleasesGoUnanswered(t *testing.T) {
	ctx := context.Background()
	b := newOneByOne("a", "b")
	if _, err := takeLock(ctx, b.Backend, "b", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	var healed atomic.Bool
	b.setRelease(func(cl driver.Claim) (error, bool) {
		if cl.Name != "a" || healed.Load() {
			return nil, false
		}
		return errReset, true
	})
	c := lock.New(b, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, MaxUnreachable: 100 * time.Millisecond})
	callCtx, cancel := context.WithTimeout(ctx, waitLimit/2) // b's holder stays for a minute
	defer cancel()
	_, err := c.AcquireMulti(callCtx, []string{"a", "b"}, time.Minute)
	if !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, errReset) {
		t.Fatalf("AcquireMulti = %v; want ErrUnreachable, ErrNotAcquired and the release's error", err)
	}
	b.expectNoBreach(t)
	if w := b.Waiting("b"); len(w) != 0 {
		t.Fatalf("left in line for b: %q", w)
	}
	healed.Store(true)
	eventually(t, "a released in the background", func() bool {
		info, err := inspectLock(ctx, b.Backend, "a")
		return err == nil && !info.Held
	})
}
