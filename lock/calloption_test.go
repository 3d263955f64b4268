package lock_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// heldBy makes "someone-else" hold name on b for a minute.
func heldBy(t *testing.T, b driver.Backend, name string) {
	t.Helper()
	if _, err := takeLock(context.Background(), b, name, "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
}

func TestWithMaxAttemptsBoundsAcquire(t *testing.T) {
	for _, tc := range []struct {
		name          string
		clientAttempt int // Options.MaxAttempts; 0 is unbounded
		call          int // WithMaxAttempts
	}{
		{"over an unbounded client", 0, 3},
		{"over a larger client bound", 5, 2},
		{"over a smaller client bound", 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewBackend()
			heldBy(t, mem, "job")
			f := &faultyBackend{Backend: mem}
			c := lock.New(f, &lock.Options{MaxAttempts: tc.clientAttempt, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Queue: polling})
			done := run(func() error {
				_, err := c.Acquire(boundedCtx(t), "job", time.Minute, lock.WithMaxAttempts(tc.call))
				return err
			})
			err := await(t, done, "Acquire with WithMaxAttempts")
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire: %v; want ErrNotAcquired and ErrHeld", err)
			}
			if n := f.attempts.Load(); n != int64(tc.call) {
				t.Fatalf("%d attempts; want %d, the call's bound", n, tc.call)
			}
		})
	}
}

func TestWithMaxAttemptsZeroLiftsTheClientsBound(t *testing.T) {
	mem := memory.NewBackend()
	heldBy(t, mem, "job")
	f := &faultyBackend{Backend: mem}
	c := lock.New(f, &lock.Options{MaxAttempts: 1, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Queue: polling})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := run(func() error {
		_, err := c.Acquire(ctx, "job", time.Minute, lock.WithMaxAttempts(0))
		return err
	})
	eventually(t, "more attempts than the client's bound of 1", func() bool { return f.attempts.Load() >= 3 })
	cancel()
	if err := await(t, done, "Acquire after cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v; want it to run until its context ended", err)
	}
}

func TestDoHonoursWithMaxAttempts(t *testing.T) {
	mem := memory.NewBackend()
	heldBy(t, mem, "job")
	f := &faultyBackend{Backend: mem}
	c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Queue: polling})
	ran := false
	done := run(func() error {
		return c.Do(boundedCtx(t), "job", time.Minute, func(context.Context, *lock.Lease) error {
			ran = true
			return nil
		}, lock.WithMaxAttempts(2))
	})
	err := await(t, done, "Do with WithMaxAttempts(2)")
	if !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("Do: %v, fn ran %v; want ErrNotAcquired by the bound, fn not run", err, ran)
	}
	if n := f.attempts.Load(); n != 2 {
		t.Fatalf("%d attempts; want 2", n)
	}
}

// boundedCtx ends after waitLimit, so that an Acquire the code under test
// fails to bound ends the test instead of hanging it.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// extendCounter counts the renewals sent for each lock name.
type extendCounter struct {
	driver.Backend
	mu      sync.Mutex
	extends map[string]int
}

func (e *extendCounter) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	e.mu.Lock()
	if e.extends == nil {
		e.extends = make(map[string]int)
	}
	e.extends[c.Name]++
	e.mu.Unlock()
	return e.Backend.Extend(ctx, c, ttl)
}

func (e *extendCounter) extendsOf(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.extends[name]
}

// keepAliveFast renews a one-minute lease every 60ms: fast enough to see
// within waitLimit, while the default interval (20s) would never show.
const keepAliveFast = 0.001

func TestWithKeepAliveTurnsItOnAndOffPerCall(t *testing.T) {
	f := &extendCounter{Backend: memory.NewBackend()}
	ctx := context.Background()
	on := lock.New(f, &lock.Options{KeepAliveInterval: keepAliveFast})                   // KeepAlive off
	off := lock.New(f, &lock.Options{KeepAlive: true, KeepAliveInterval: keepAliveFast}) // KeepAlive on

	kept, err := on.Acquire(ctx, "kept", time.Minute, lock.WithKeepAlive(true))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release(ctx)
	tried, err := on.TryAcquire(ctx, "tried", time.Minute, lock.WithKeepAlive(true))
	if err != nil {
		t.Fatal(err)
	}
	defer tried.Release(ctx)
	idle, err := off.Acquire(ctx, "idle", time.Minute, lock.WithKeepAlive(false))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Release(ctx)
	idleTry, err := off.TryAcquire(ctx, "idle-try", time.Minute, lock.WithKeepAlive(false))
	if err != nil {
		t.Fatal(err)
	}
	defer idleTry.Release(ctx)

	eventually(t, "renewals of the leases kept alive per call", func() bool {
		return f.extendsOf("kept") >= 3 && f.extendsOf("tried") >= 3
	})
	// Both kinds of lease were started before the renewals were counted:
	// a keep-alive on the idle ones would have renewed them as often.
	if n := f.extendsOf("idle") + f.extendsOf("idle-try"); n != 0 {
		t.Fatalf("%d renewals of leases acquired WithKeepAlive(false); want 0", n)
	}
}

func TestDoWithoutKeepAliveEndsAtTheLocalDeadline(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	c := lock.New(f, &lock.Options{KeepAlive: true, KeepAliveInterval: keepAliveFast})
	err := c.Do(context.Background(), "job", 300*time.Millisecond, func(ctx context.Context, _ *lock.Lease) error {
		await(t, ctx.Done(), "fn's context at the lease's local deadline")
		return nil
	}, lock.WithKeepAlive(false))
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do: %v; want the lease lost at its local deadline, not renewed", err)
	}
	if n := f.extends.Load(); n != 0 {
		t.Fatalf("%d renewals; want 0 with WithKeepAlive(false)", n)
	}
}

func TestWithKeepAliveIntervalSetsTheRenewalPace(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	ctx := context.Background()
	c := lock.New(f, &lock.Options{KeepAlive: true}) // default: every 20s of a minute
	lease, err := c.Acquire(ctx, "job", time.Minute, lock.WithKeepAliveInterval(keepAliveFast))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	eventually(t, "renewals at the call's interval", func() bool { return f.extends.Load() >= 3 })
}

func TestWithKeepAliveIntervalIsCheckedAgainstTheTTL(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	c := lock.New(f, &lock.Options{KeepAlive: true})
	// 0.999 of a 100ms TTL comes after its local deadline (100ms - 3ms).
	_, err := c.Acquire(context.Background(), "job", 100*time.Millisecond, lock.WithKeepAliveInterval(0.999))
	if !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Acquire: %v; want ErrInvalid for the call's interval", err)
	}
	if n := f.attempts.Load(); n != 0 {
		t.Fatalf("%d attempts sent; want none", n)
	}
	// The same interval on the Extend of a lease acquired with it.
	lease, err := c.Acquire(context.Background(), "job", time.Minute, lock.WithKeepAliveInterval(0.9))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	// 0.9 of 10ms comes after its local deadline (10ms - 2.1ms); the
	// Client's 1/3 would not.
	if err := lease.Extend(context.Background(), 10*time.Millisecond); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Extend: %v; want ErrInvalid under the interval the lease was acquired with", err)
	}
}

func TestInvalidCallOptionsAreRefusedBeforeAnythingIsSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  lock.CallOption
	}{
		{"negative attempts", lock.WithMaxAttempts(-1)},
		{"negative max unreachable", lock.WithMaxUnreachable(-time.Second)},
		{"zero interval", lock.WithKeepAliveInterval(0)},
		{"interval of one", lock.WithKeepAliveInterval(1)},
		{"negative interval", lock.WithKeepAliveInterval(-0.5)},
		{"NaN interval", lock.WithKeepAliveInterval(math.NaN())},
		{"nil option", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend()}
			c := lock.New(f, nil)
			ctx := context.Background()
			ran := false
			fn := func(context.Context, *lock.Lease) error { ran = true; return nil }
			calls := map[string]func() error{
				"Acquire":    func() error { _, err := c.Acquire(ctx, "job", time.Minute, tc.opt); return err },
				"TryAcquire": func() error { _, err := c.TryAcquire(ctx, "job", time.Minute, tc.opt); return err },
				"Do":         func() error { return c.Do(ctx, "job", time.Minute, fn, tc.opt) },
				"TryDo":      func() error { return c.TryDo(ctx, "job", time.Minute, fn, tc.opt) },
			}
			for call, f := range calls {
				if err := f(); !errors.Is(err, lock.ErrInvalid) {
					t.Errorf("%s: %v; want ErrInvalid", call, err)
				}
			}
			if n := f.attempts.Load(); n != 0 || ran {
				t.Fatalf("%d attempts sent, fn ran %v; want none", n, ran)
			}
		})
	}
}

func TestCallOptionsDoNotChangeTheClient(t *testing.T) {
	mem := memory.NewBackend()
	heldBy(t, mem, "job")
	f := &faultyBackend{Backend: mem}
	c := lock.New(f, &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, Queue: polling})
	_, _ = c.Acquire(boundedCtx(t), "job", time.Minute, lock.WithMaxAttempts(5))
	f.attempts.Store(0)
	_, err := c.Acquire(boundedCtx(t), "job", time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatal(err)
	}
	if n := f.attempts.Load(); n != 2 {
		t.Fatalf("%d attempts after a call with WithMaxAttempts(5); want the Client's 2", n)
	}
}
