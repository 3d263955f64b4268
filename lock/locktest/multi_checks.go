package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// MultiChecks returns the checks of multi-name acquisition
// (lock.Client.AcquireMulti and its kin) over a backend. They hold for
// every Backend: over one without lock.MultiBackend the Client takes the
// names in order and rolls back, and RunMulti runs them that way over a
// MultiBackend as well.
func MultiChecks() []Check {
	return []Check{
		{"MultiTokensRisePerName", checkMultiTokensRise},
		{"MultiAllOrNothing", checkMultiAllOrNothing},
		{"MultiWaiterHoldsNothing", checkMultiWaiterHoldsNothing},
		{"MultiOpposedOrdersBothFinish", checkMultiOpposedOrders},
		{"MultiLossLosesSet", checkMultiLossLosesSet},
		{"MultiReleaseFreesAll", checkMultiReleaseFreesAll},
		{"MultiKeepAliveRenewsAll", checkMultiKeepAlive},
		{"MultiRefusesBadSet", checkMultiInvalid},
	}
}

// MultiBackendChecks returns the checks of the optional capability
// lock.MultiBackend, called directly. Each fails at once on a backend
// without it, and passes (having checked that nothing changed) on one that
// answers lock.ErrNotAtomic for its set.
func MultiBackendChecks() []Check {
	return []Check{
		{"AcquireMultiAllOrNothing", checkAcquireMultiAtomic},
	}
}

// RunMulti runs MultiChecks as subtests of t; when the backend implements
// lock.MultiBackend, it runs MultiBackendChecks too, and MultiChecks once
// more with that capability hidden ("InOrder/"), so that the Client's
// in-order path is checked on that backend as well; and when it implements
// lock.QueueBackend, MultiChecks once more with every capability hidden
// ("Polling/"), so that waiting by polling is checked too. Run calls it, so
// every backend is checked without a line of its own.
func RunMulti(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	run := func(t *testing.T, checks []Check, wrap func(lock.Backend) lock.Backend) {
		runChecks(t, checks, func(t *testing.T) lock.Backend { return wrap(newBackend(t)) })
	}
	same := func(b lock.Backend) lock.Backend { return b }
	run(t, MultiChecks(), same)
	if _, ok := newBackend(t).(lock.MultiBackend); ok {
		run(t, MultiBackendChecks(), same)
		t.Run("InOrder", func(t *testing.T) { run(t, MultiChecks(), WithoutMulti) })
	}
	if _, ok := newBackend(t).(lock.QueueBackend); ok {
		t.Run("Polling", func(t *testing.T) { run(t, MultiChecks(), BaseOnly) })
	}
}

// BaseOnly returns b with every optional capability hidden: a Client over
// it takes a set of names in order and polls while it waits.
func BaseOnly(b lock.Backend) lock.Backend { return struct{ lock.Backend }{b} }

// WithoutMulti returns b with the capability lock.MultiBackend hidden (and
// lock.QueueBackend kept when b has it), so that a Client over it takes a
// set of names in order.
func WithoutMulti(b lock.Backend) lock.Backend {
	if q, ok := b.(lock.QueueBackend); ok {
		return struct{ lock.QueueBackend }{q}
	}
	return struct{ lock.Backend }{b}
}

// Durations of the multi checks.
const (
	multiPlaceTTL = 300 * time.Millisecond // a waiter in line renews every 100ms
)

// multiClient is the Client the multi checks drive: quick backoff and short
// places in line, so that a waiter is seen to be active soon; events go to
// observe when it is not nil.
func multiClient(b lock.Backend, observe func(lock.Event)) *lock.Client {
	return lock.New(b, &lock.Options{
		MinBackoff: time.Millisecond,
		MaxBackoff: 20 * time.Millisecond,
		Queue:      lock.QueueOptions{PlaceTTL: multiPlaceTTL},
		Observer:   observe,
	})
}

// expectSet fails unless Inspect reports every name of set held by its
// owner with the set's token for that name.
func expectSet(ctx context.Context, b lock.Backend, set *lock.MultiLease) error {
	for _, name := range set.Names() {
		if err := expectHolder(ctx, b, name, set.Owner(), set.Token(name)); err != nil {
			return err
		}
	}
	return nil
}

// takeWhenFree polls until owner takes name with a plain Acquire, failing
// after waitFor: a set whose acquiring pass holds name for a moment may be
// in the way, but never for long.
func takeWhenFree(ctx context.Context, b lock.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	deadline := time.Now().Add(waitFor)
	for {
		tok, err := b.Acquire(ctx, name, owner, ttl)
		if err == nil {
			return tok, nil
		}
		if !errors.Is(err, lock.ErrHeld) || time.Now().After(deadline) {
			return 0, fmt.Errorf("Acquire(%q) by a bystander: %w (a waiter for a set must hold none of it while it waits)", name, err)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func checkMultiTokensRise(ctx context.Context, b lock.Backend, ns string) error {
	a, c := ns+"a", ns+"b"
	o := owner()
	ta, err := acquire(ctx, b, a, o, longTTL)
	if err != nil {
		return err
	}
	tc, err := acquire(ctx, b, c, o, longTTL)
	if err != nil {
		return err
	}
	if err := first(b.Release(ctx, a, o), b.Release(ctx, c, o)); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	client := multiClient(b, nil)
	prev := map[string]fence.Token{a: ta, c: tc}
	for round := 0; round < 3; round++ {
		set, err := client.TryAcquireMulti(ctx, []string{c, a}, longTTL) // any order
		if err != nil {
			return fmt.Errorf("TryAcquireMulti of a free set: %w", err)
		}
		if got := set.Names(); !slices.Equal(got, []string{a, c}) {
			return fmt.Errorf("Names() = %q; want %q, sorted", got, []string{a, c})
		}
		for _, name := range []string{a, c} {
			if tok := set.Token(name); tok <= prev[name] || !tok.Valid() {
				return fmt.Errorf("round %d: Token(%q) = %d; want a valid token above %d, the last one issued for that name", round, name, tok, prev[name])
			}
			if set.Lease(name) == nil || set.Lease(name).Token() != set.Token(name) {
				return fmt.Errorf("Lease(%q) does not carry Token(%q)", name, name)
			}
			prev[name] = set.Token(name)
		}
		if set.Token(ns+"other") != 0 || set.Lease(ns+"other") != nil {
			return fmt.Errorf("Token and Lease of a name outside the set are not zero and nil")
		}
		if err := expectSet(ctx, b, set); err != nil {
			return err
		}
		if err := set.Release(ctx); err != nil {
			return fmt.Errorf("Release of the set: %w", err)
		}
	}
	return nil
}

func checkMultiAllOrNothing(ctx context.Context, b lock.Backend, ns string) error {
	a, mid, c := ns+"a", ns+"b", ns+"c"
	x := owner()
	tx, err := acquire(ctx, b, mid, x, longTTL)
	if err != nil {
		return err
	}
	client := multiClient(b, nil)
	_, err = client.TryAcquireMulti(ctx, []string{c, mid, a}, longTTL)
	if err := first(expectIs("TryAcquireMulti with one name held", err, lock.ErrHeld),
		expectIs("TryAcquireMulti with one name held", err, lock.ErrNotAcquired)); err != nil {
		return err
	}
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Name != mid {
		return fmt.Errorf("TryAcquireMulti with %q held: error %v; want a *lock.HeldError naming %q", mid, err, mid)
	}
	if err := first(expectFree(ctx, b, a), expectFree(ctx, b, c), expectHolder(ctx, b, mid, x, tx)); err != nil {
		return fmt.Errorf("after a refused TryAcquireMulti: %w", err)
	}
	// A blocking AcquireMulti that gives up leaves nothing held either.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = client.AcquireMulti(wctx, []string{a, mid, c}, longTTL)
	cancel()
	if err := expectIs("AcquireMulti that timed out", err, lock.ErrNotAcquired); err != nil {
		return err
	}
	if err := first(expectFree(ctx, b, a), expectFree(ctx, b, c)); err != nil {
		return fmt.Errorf("after AcquireMulti gave up: %w", err)
	}
	if err := b.Release(ctx, mid, x); err != nil {
		return fmt.Errorf("Release(%q) by its holder: %w", mid, err)
	}
	set, err := client.TryAcquireMulti(ctx, []string{a, mid, c}, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquireMulti once the set is free: %w", err)
	}
	return first(expectSet(ctx, b, set), set.Release(ctx))
}

func checkMultiWaiterHoldsNothing(ctx context.Context, b lock.Backend, ns string) error {
	a, c := ns+"a", ns+"b"
	x, y, z := owner(), owner(), owner()
	tx, err := acquire(ctx, b, c, x, longTTL)
	if err != nil {
		return err
	}
	var retries atomic.Int64
	client := multiClient(b, func(ev lock.Event) {
		if ev.Kind == lock.EventRetrying {
			retries.Add(1)
		}
	})
	var yLetGo atomic.Bool
	type result struct {
		set        *lock.MultiLease
		err        error
		afterLetGo bool
	}
	done := make(chan result, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		set, err := client.AcquireMulti(wctx, []string{a, c}, longTTL)
		done <- result{set, err, yLetGo.Load()}
	}()
	// While the waiter waits for c, a bystander can take a.
	ty, err := takeWhenFree(ctx, b, a, y, longTTL)
	if err != nil {
		return err
	}
	if err := b.Release(ctx, c, x); err != nil {
		return fmt.Errorf("Release(%q): %w", c, err)
	}
	// The waiter now waits for a; it must let go of c meanwhile.
	since := retries.Load()
	deadline := time.Now().Add(waitFor)
	for retries.Load() < since+2 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the waiter for %q made no attempt within %v", []string{a, c}, waitFor)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
	tz, err := takeWhenFree(ctx, b, c, z, longTTL)
	if err != nil {
		return err
	}
	if err := b.Release(ctx, c, z); err != nil {
		return fmt.Errorf("Release(%q): %w", c, err)
	}
	yLetGo.Store(true)
	if err := b.Release(ctx, a, y); err != nil {
		return fmt.Errorf("Release(%q): %w", a, err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(waitFor):
		return fmt.Errorf("AcquireMulti did not finish within %v of the set becoming free", waitFor)
	}
	if r.err != nil {
		return fmt.Errorf("AcquireMulti: %w", r.err)
	}
	defer r.set.Release(ctx)
	if !r.afterLetGo {
		return fmt.Errorf("AcquireMulti returned while a bystander still held %q", a)
	}
	if r.set.Token(a) <= ty || r.set.Token(c) <= max(tx, tz) {
		return fmt.Errorf("tokens %d, %d; want above the bystanders' %d, %d", r.set.Token(a), r.set.Token(c), ty, max(tx, tz))
	}
	return expectSet(ctx, b, r.set)
}

func checkMultiOpposedOrders(ctx context.Context, b lock.Backend, ns string) error {
	a, c := ns+"a", ns+"b"
	const rounds = 5
	var (
		inside [2]atomic.Int64
		mu     sync.Mutex
		last   = map[string]fence.Token{}
		errs   []error
		wg     sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w, order := range [][]string{{a, c}, {c, a}} {
		client := multiClient(b, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				err := client.DoMulti(ctx, order, longTTL, func(ctx context.Context, set *lock.MultiLease) error {
					for k := range inside {
						if n := inside[k].Add(1); n != 1 {
							return fmt.Errorf("worker %d: %d holders of %q at once", w, n, []string{a, c}[k])
						}
					}
					mu.Lock()
					for _, name := range []string{a, c} {
						if tok := set.Token(name); tok <= last[name] {
							mu.Unlock()
							return fmt.Errorf("token %d for %q, not above the previous holder's %d", tok, name, last[name])
						}
						last[name] = set.Token(name)
					}
					mu.Unlock()
					for k := range inside {
						inside[k].Add(-1)
					}
					return nil
				})
				if err != nil {
					fail(fmt.Errorf("DoMulti(%q): %w", order, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func checkMultiLossLosesSet(ctx context.Context, b lock.Backend, ns string) error {
	a, c := ns+"a", ns+"b"
	client := multiClient(b, nil)
	// Renewals every 200ms of a 10s lease: the loss is seen soon, and a
	// freed by the set's release long before its TTL would run out.
	set, err := client.AcquireMulti(ctx, []string{a, c}, longTTL, lock.WithKeepAlive(true), lock.WithKeepAliveInterval(0.02))
	if err != nil {
		return fmt.Errorf("AcquireMulti: %w", err)
	}
	if err := b.Release(ctx, c, set.Owner()); err != nil {
		return fmt.Errorf("Release(%q) behind the set's back: %w", c, err)
	}
	if err := waitChan(ctx, set.Done(), "the set's end after one of its leases was lost"); err != nil {
		return err
	}
	if err := first(expectIs("Err of the set", set.Err(), lock.ErrLost), expectIs("context.Cause of the set", context.Cause(set.Context()), lock.ErrLost)); err != nil {
		return err
	}
	if err := waitFree(ctx, b, a); err != nil {
		return fmt.Errorf("the other lease of a lost set: %w", err)
	}
	return expectIs("Release of a lost set", set.Release(ctx), lock.ErrNotHeld)
}

func checkMultiReleaseFreesAll(ctx context.Context, b lock.Backend, ns string) error {
	names := []string{ns + "c", ns + "a", ns + "b"}
	client := multiClient(b, nil)
	set, err := client.TryAcquireMulti(ctx, names, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquireMulti: %w", err)
	}
	if err := set.Err(); err != nil {
		return fmt.Errorf("Err of a live set: %v; want nil", err)
	}
	if err := set.Release(ctx); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := waitChan(ctx, set.Done(), "Done after Release"); err != nil {
		return err
	}
	if err := expectIs("Err after Release", set.Err(), lock.ErrReleased); err != nil {
		return err
	}
	for _, n := range names {
		if err := expectFree(ctx, b, n); err != nil {
			return fmt.Errorf("after Release of the set: %w", err)
		}
	}
	if err := set.Release(ctx); err != nil {
		return fmt.Errorf("second Release: %v; want nil", err)
	}
	return nil
}

func checkMultiKeepAlive(ctx context.Context, b lock.Backend, ns string) error {
	names := []string{ns + "a", ns + "b"}
	// Renewals every 100ms of a 10s lease: a loaded server has 9.9s to
	// answer each one.
	const ttl, past = longTTL, 300 * time.Millisecond
	client := multiClient(b, nil)
	set, err := client.AcquireMulti(ctx, names, ttl, lock.WithKeepAlive(true), lock.WithKeepAliveInterval(0.01))
	if err != nil {
		return fmt.Errorf("AcquireMulti: %w", err)
	}
	defer set.Release(ctx)
	// The earliest deadline moving past means every lease was renewed.
	first0 := set.Deadline()
	deadline := time.Now().Add(waitFor)
	for !set.Deadline().After(first0.Add(past)) {
		if err := set.Err(); err != nil {
			return fmt.Errorf("a kept-alive set ended: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the set's deadline did not move %v past the first within %v", past, waitFor)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	for _, n := range names {
		if !set.Lease(n).Deadline().After(first0.Add(past)) {
			return fmt.Errorf("lease on %q not renewed with the set", n)
		}
	}
	return first(set.Err(), expectSet(ctx, b, set))
}

func checkMultiInvalid(ctx context.Context, b lock.Backend, ns string) error {
	client := multiClient(b, nil)
	a := ns + "a"
	many := make([]string, lock.MaxMultiNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("%s%d", ns, i)
	}
	for _, bad := range [][]string{nil, {a, a}, {a, ""}, many} {
		if _, err := client.TryAcquireMulti(ctx, bad, longTTL); !errors.Is(err, lock.ErrInvalid) {
			return fmt.Errorf("TryAcquireMulti(%d names %.40q): %v; want ErrInvalid", len(bad), bad, err)
		}
		if err := client.DoMulti(ctx, bad, longTTL, func(context.Context, *lock.MultiLease) error { return nil }); !errors.Is(err, lock.ErrInvalid) {
			return fmt.Errorf("DoMulti(%d names): %v; want ErrInvalid", len(bad), err)
		}
	}
	return expectFree(ctx, b, a)
}

func checkAcquireMultiAtomic(ctx context.Context, b lock.Backend, ns string) error {
	mb, ok := b.(lock.MultiBackend)
	if !ok {
		return fmt.Errorf("%T does not implement lock.MultiBackend", b)
	}
	a, mid, c := ns+"a", ns+"b", ns+"c"
	x, o := owner(), owner()
	ta, err := acquire(ctx, b, a, o, longTTL)
	if err != nil {
		return err
	}
	if err := b.Release(ctx, a, o); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	tx, err := acquire(ctx, b, mid, x, longTTL)
	if err != nil {
		return err
	}
	_, err = mb.AcquireMulti(ctx, []string{a, mid, c}, o, longTTL)
	if errors.Is(err, lock.ErrNotAtomic) {
		// Allowed (names in different Redis Cluster slots, say), if it
		// changed nothing.
		if err := first(expectFree(ctx, b, a), expectFree(ctx, b, c), expectHolder(ctx, b, mid, x, tx)); err != nil {
			return fmt.Errorf("after AcquireMulti answered ErrNotAtomic (it must change nothing): %w", err)
		}
		return b.Release(ctx, mid, x)
	}
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Name != mid {
		return fmt.Errorf("AcquireMulti with %q held by another owner: %v; want a *lock.HeldError naming %q", mid, err, mid)
	}
	if err := first(expectFree(ctx, b, a), expectFree(ctx, b, c), expectHolder(ctx, b, mid, x, tx)); err != nil {
		return fmt.Errorf("after a refused AcquireMulti (it must change nothing): %w", err)
	}
	if err := b.Release(ctx, mid, x); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	tokens, err := mb.AcquireMulti(ctx, []string{a, mid, c}, o, longTTL)
	if err != nil {
		return fmt.Errorf("AcquireMulti of a free set: %w", err)
	}
	if len(tokens) != 3 || tokens[0] <= ta || tokens[1] <= tx || !tokens[2].Valid() {
		return fmt.Errorf("AcquireMulti tokens %v; want 3, above %d and %d for the first two", tokens, ta, tx)
	}
	for i, n := range []string{a, mid, c} {
		if err := expectHolder(ctx, b, n, o, tokens[i]); err != nil {
			return err
		}
	}
	again, err := mb.AcquireMulti(ctx, []string{a, mid, c}, o, longTTL)
	if err != nil || !slices.Equal(again, tokens) {
		return fmt.Errorf("AcquireMulti retried by the same owner = %v, %v; want the same tokens %v", again, err, tokens)
	}
	if _, err := mb.AcquireMulti(ctx, []string{a, a}, o, longTTL); !errors.Is(err, lock.ErrInvalid) {
		return fmt.Errorf("AcquireMulti with a name twice: %v; want ErrInvalid", err)
	}
	for _, n := range []string{a, mid, c} {
		if err := b.Release(ctx, n, o); err != nil {
			return fmt.Errorf("Release(%q): %w", n, err)
		}
	}
	return nil
}
