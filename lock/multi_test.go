package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

func TestMultiMemberReleasedAloneLosesSet(t *testing.T) {
	ctx := context.Background()
	mem := memory.NewBackend()
	set, err := lock.New(mem, nil).TryAcquireMulti(ctx, []string{"b", "a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Lease("a").Release(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, set.Done(), "the set's end")
	if !errors.Is(set.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", set.Err())
	}
	eventually(t, "b released with the lost set", func() bool {
		info, err := inspectLock(ctx, mem, "b")
		return err == nil && !info.Held
	})
}

func TestMultiExpiryLosesSet(t *testing.T) {
	mem := memory.NewBackend()
	set, err := lock.New(mem, nil).TryAcquireMulti(context.Background(), []string{"a", "b"}, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	await(t, set.Done(), "the set's end at its deadline")
	if !errors.Is(set.Err(), lock.ErrLost) || !errors.Is(context.Cause(set.Context()), lock.ErrLost) {
		t.Fatalf("Err = %v, cause %v; want ErrLost", set.Err(), context.Cause(set.Context()))
	}
}

func TestMultiExtendRenewsEveryLease(t *testing.T) {
	ctx := context.Background()
	mem := memory.NewBackend()
	set, err := lock.New(mem, nil).TryAcquireMulti(ctx, []string{"a", "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := set.Deadline()
	if err := set.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range set.Names() {
		if d := set.Lease(n).Deadline(); !d.After(before.Add(50 * time.Second)) {
			t.Fatalf("lease %q deadline %v not moved by Extend (was %v)", n, d, before)
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := set.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of a released set: %v; want ErrNotHeld", err)
	}
}

func TestMultiObserverHearsEachName(t *testing.T) {
	rec := &recorder{}
	mem := memory.NewBackend()
	set, err := lock.New(mem, &lock.Options{Observer: rec.observer()}).TryAcquireMulti(context.Background(), []string{"b", "a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := rec.of("acquired")
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" || got[0].Token != set.Token("a") || got[1].Token != set.Token("b") {
		t.Fatalf("Acquired events %+v; want one per name, sorted, with its token", got)
	}
}

func TestDoMultiReleasesWhenFnPanics(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		_ = c.DoMulti(context.Background(), []string{"a", "b"}, time.Minute, func(context.Context, *lock.MultiLease) error {
			panic("boom")
		})
	}()
	expectFree(t, mem, "a")
	expectFree(t, mem, "b")
}

func TestDoMultiReturnsFnErrorAndReleases(t *testing.T) {
	mem := memory.NewBackend()
	errFn := errors.New("fn failed")
	err := lock.New(mem, nil).DoMulti(context.Background(), []string{"a", "b"}, time.Minute, func(ctx context.Context, set *lock.MultiLease) error {
		if set.Token("a") == 0 || set.Token("b") == 0 || ctx.Err() != nil {
			t.Error("fn ran without a live set")
		}
		return errFn
	})
	if !errors.Is(err, errFn) || errors.Is(err, lock.ErrLost) {
		t.Fatalf("DoMulti = %v; want fn's error alone", err)
	}
	expectFree(t, mem, "a")
	expectFree(t, mem, "b")
}

func TestDoMultiContextEndsWithSet(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	err := c.DoMulti(context.Background(), []string{"a", "b"}, time.Second, func(ctx context.Context, set *lock.MultiLease) error {
		if err := releaseLock(context.Background(), mem, "b", set.Owner()); err != nil {
			return err
		}
		await(t, ctx.Done(), "fn's context ending with the set")
		return context.Cause(ctx)
	}, lock.WithKeepAliveInterval(0.05))
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("DoMulti = %v; want ErrLost", err)
	}
	eventually(t, "a released with the lost set", func() bool {
		info, err := inspectLock(context.Background(), mem, "a")
		return err == nil && !info.Held
	})
}

func TestTryDoMultiHeld(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := takeLock(context.Background(), mem, "b", "someone", time.Minute); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := lock.New(mem, nil).TryDoMulti(context.Background(), []string{"a", "b"}, time.Minute, func(context.Context, *lock.MultiLease) error {
		ran = true
		return nil
	})
	if !errors.Is(err, lock.ErrHeld) || !errors.Is(err, lock.ErrNotAcquired) || ran {
		t.Fatalf("TryDoMulti with b held = %v (fn ran: %v); want ErrHeld and ErrNotAcquired, fn not run", err, ran)
	}
	expectFree(t, mem, "a")
}

func TestAcquireMultiGivesUp(t *testing.T) {
	for _, polling := range []bool{false, true} {
		mem := memory.NewBackend()
		if _, err := takeLock(context.Background(), mem, "b", "someone", time.Minute); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		c := lock.New(mem, &lock.Options{Observer: rec.observer(), MinBackoff: time.Millisecond, Queue: lock.QueueOptions{Polling: polling, PlaceTTL: 30 * time.Millisecond}})
		_, err := c.AcquireMulti(context.Background(), []string{"a", "b", "c"}, time.Minute, lock.WithMaxAttempts(3))
		if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("polling %v: AcquireMulti after 3 attempts = %v; want ErrNotAcquired and ErrHeld", polling, err)
		}
		if n := len(rec.of("retrying")); n != 2 {
			t.Fatalf("polling %v: %d Retrying events; want 2 for 3 attempts", polling, n)
		}
		expectFree(t, mem, "a")
		expectFree(t, mem, "c")

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = c.AcquireMulti(ctx, []string{"a", "b"}, time.Minute)
		cancel()
		if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("polling %v: AcquireMulti past its context = %v; want ErrNotAcquired and DeadlineExceeded", polling, err)
		}
		expectFree(t, mem, "a")
	}
}

func TestMultiRefusesBadCalls(t *testing.T) {
	ctx := context.Background()
	var nilClient *lock.Client
	if _, err := nilClient.TryAcquireMulti(ctx, []string{"a"}, time.Minute); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("nil client: %v; want ErrInvalid", err)
	}
	c := lock.New(memory.NewBackend(), nil)
	if err := c.DoMulti(ctx, []string{"a"}, time.Minute, nil); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("nil fn: %v; want ErrInvalid", err)
	}
	if _, err := c.AcquireMulti(ctx, []string{"a"}, 0); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("ttl 0: %v; want ErrInvalid", err)
	}
	if _, err := c.AcquireMulti(ctx, []string{"a"}, time.Minute, nil); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("nil option: %v; want ErrInvalid", err)
	}
}

// brokenExtendB is a memory backend whose renewals of "b" fail for good
// (an error for which driver.Retryable is false), while the server still
// holds b.
type brokenExtendB struct{ *memory.Backend }

var errBrokenExtend = errors.New("extend: script error")

func (s brokenExtendB) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if c.Name == "b" {
		return errBrokenExtend
	}
	return s.Backend.Extend(ctx, c, ttl)
}

// TestMultiLossReleasesEveryLease: a set lost because one lease's renewal
// failed for good releases all its leases, the lost one included, which the
// server may still hold.
func TestMultiLossReleasesEveryLease(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(brokenExtendB{mem}, nil)
	set, err := c.AcquireMulti(context.Background(), []string{"a", "b"}, time.Minute, lock.WithKeepAlive(true), lock.WithKeepAliveInterval(0.001))
	if err != nil {
		t.Fatal(err)
	}
	await(t, set.Done(), "the set's end")
	if !errors.Is(set.Err(), errBrokenExtend) {
		t.Fatalf("Err = %v; want the renewal's error", set.Err())
	}
	for _, n := range []string{"a", "b"} {
		eventually(t, n+" released with the lost set", func() bool {
			info, err := inspectLock(context.Background(), mem, n)
			return err == nil && !info.Held
		})
	}
}

// TestAcquireMultiLeavesQueueWhenGivingUp: a waiter that gives up leaves the
// line of the name it waited for.
func TestAcquireMultiLeavesQueueWhenGivingUp(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := takeLock(context.Background(), mem, "b", "someone", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := lock.New(mem, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := run(func() error {
		_, err := c.AcquireMulti(ctx, []string{"a", "b"}, time.Minute)
		return err
	})
	eventually(t, "the waiter in line for b", func() bool { return len(mem.Waiting("b")) == 1 })
	cancel()
	if err := await(t, done, "AcquireMulti's return"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("AcquireMulti = %v; want ErrNotAcquired", err)
	}
	if w := mem.Waiting("b"); len(w) != 0 {
		t.Fatalf("still in line for b: %q", w)
	}
	expectFree(t, mem, "a")
}

// permanentAcquire is a backend whose acquire of "b" fails for good. It
// takes a set name by name (driver.ErrNotAtomic), so that "a" is taken
// before "b" fails and must be let go again.
type permanentAcquire struct{ driver.Backend }

var errNoTable = errors.New("relation does not exist")

func (p permanentAcquire) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	switch {
	case req.Names != nil:
		return driver.Grant{}, driver.ErrNotAtomic
	case req.Name == "b":
		return driver.Grant{}, errNoTable
	}
	return p.Backend.Acquire(ctx, req)
}

func TestAcquireMultiPermanentErrorNotRetried(t *testing.T) {
	mem := memory.NewBackend()
	_, err := lock.New(permanentAcquire{mem}, &lock.Options{Queue: polling}).AcquireMulti(context.Background(), []string{"a", "b"}, time.Minute)
	if !errors.Is(err, errNoTable) || !errors.Is(err, lock.ErrNotAcquired) || !strings.Contains(err.Error(), "1 attempt") {
		t.Fatalf("AcquireMulti = %v; want ErrNotAcquired and the error, after 1 attempt", err)
	}
	expectFree(t, mem, "a")
}

func TestMultiReleaseOfSetNotHeld(t *testing.T) {
	ctx := context.Background()
	mem := memory.NewBackend()
	set, err := lock.New(mem, nil).TryAcquireMulti(ctx, []string{"a", "b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := releaseLock(ctx, mem, "b", set.Owner()); err != nil {
		t.Fatal(err)
	}
	err = set.Release(ctx)
	if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release with b gone = %v; want ErrNotHeld and ErrLost", err)
	}
	expectFree(t, mem, "a")
}

// lostReleaseReply is a backend whose first release of "a" fails with an
// unknown outcome, sending nothing.
type lostReleaseReply struct {
	driver.Backend
	failed atomic.Bool
}

func (l *lostReleaseReply) Release(ctx context.Context, c driver.Claim) error {
	if c.Name == "a" && l.failed.CompareAndSwap(false, true) {
		return driver.Transient(errors.New("connection reset"))
	}
	return l.Backend.Release(ctx, c)
}

func TestDoMultiRetriesUnknownRelease(t *testing.T) {
	mem := memory.NewBackend()
	b := &lostReleaseReply{Backend: mem}
	err := lock.New(b, nil).DoMulti(context.Background(), []string{"a", "b"}, time.Minute, func(context.Context, *lock.MultiLease) error { return nil })
	if err != nil || !b.failed.Load() {
		t.Fatalf("DoMulti = %v (release failed once: %v); want nil after a second release", err, b.failed.Load())
	}
	expectFree(t, mem, "a")
	expectFree(t, mem, "b")
}

// unreachableBackend answers no acquire: every attempt fails transiently.
type unreachableBackend struct{ driver.Backend }

func (unreachableBackend) Acquire(context.Context, driver.Request) (driver.Grant, error) {
	return driver.Grant{}, driver.Transient(errors.New("connection refused"))
}

func TestAcquireMultiGivesUpWhenUnreachable(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(unreachableBackend{mem}, &lock.Options{MaxUnreachable: 100 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Queue: polling})
	_, err := c.AcquireMulti(context.Background(), []string{"a", "b"}, time.Minute)
	if !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("AcquireMulti = %v; want ErrUnreachable and ErrNotAcquired", err)
	}
}
