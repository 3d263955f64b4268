package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// setPath is a way the multi checks reach the backend: as it is, or over
// notAtomic, which makes the Client take every set one name at a time,
// waiting in line or by polling.
type setPath struct {
	prefix  string // of the checks' names
	inOrder bool   // over notAtomic
	polling bool   // the Client polls instead of waiting in line
}

// setPaths are the ways every multi check is run.
var setPaths = []setPath{
	{prefix: "Multi/"},
	{prefix: "Multi/InOrder/", inOrder: true},
	{prefix: "Multi/Polling/", inOrder: true, polling: true},
}

// multiCheck is a check of sets through the Client, run on every setPath.
type multiCheck struct {
	name string
	run  func(ctx context.Context, b driver.Backend, ns string, p setPath) error
}

// multiChecks are the checks of sets (Request.Names): the Client's
// (lock.Client.AcquireMulti and its kin) on every setPath, and the
// driver's one-step set (SetAllOrNothing, SetBystanderSeesNoPart).
func multiChecks() []Check {
	var checks []Check
	for _, p := range setPaths {
		for _, c := range []multiCheck{
			{"MultiTokensRisePerName", checkMultiTokensRise},
			{"MultiAllOrNothing", checkMultiAllOrNothing},
			{"MultiWaiterHoldsNothing", checkMultiWaiterHoldsNothing},
			{"MultiOpposedOrdersBothFinish", checkMultiOpposedOrders},
			{"MultiLossLosesSet", checkMultiLossLosesSet},
			{"MultiReleaseFreesAll", checkMultiReleaseFreesAll},
			{"MultiKeepAliveRenewsAll", checkMultiKeepAlive},
			{"MultiRefusesBadSet", checkMultiInvalid},
		} {
			checks = append(checks, Check{Name: p.prefix + c.name, Run: p.bind(c.run)})
		}
		if !p.inOrder {
			checks = append(checks,
				Check{Name: p.prefix + "SetAllOrNothing", Run: checkSetAtomic},
				Check{Name: p.prefix + "SetBystanderSeesNoPart", Run: checkSetUnseenPart})
		}
	}
	return checks
}

// bind makes a Check of run on path p.
func (p setPath) bind(run func(ctx context.Context, b driver.Backend, ns string, p setPath) error) func(ctx context.Context, b driver.Backend, ns string) error {
	return func(ctx context.Context, b driver.Backend, ns string) error {
		if p.inOrder {
			b = notAtomic{b}
		}
		return run(ctx, b, ns, p)
	}
}

// notAtomic is a backend that cannot take a set of names in one step: it
// answers driver.ErrNotAtomic to every set, changing nothing, and passes
// every other call on. Over it a Client takes each set one name at a time.
type notAtomic struct{ driver.Backend }

func (n notAtomic) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, fmt.Errorf("%w: a set of %d names", driver.ErrNotAtomic, len(req.Names))
	}
	return n.Backend.Acquire(ctx, req)
}

// Durations of the multi checks.
const (
	multiPlaceTTL = 300 * time.Millisecond // a waiter in line renews every 100ms
)

// multiClient is the Client the multi checks drive on path p: quick backoff
// and short places in line, so that a waiter is seen to be active soon;
// events go to observer when it is not nil.
func multiClient(b driver.Backend, p setPath, observer *lock.Observer) *lock.Client {
	return lock.New(b, &lock.Options{
		MinBackoff: time.Millisecond,
		MaxBackoff: 20 * time.Millisecond,
		Queue:      lock.QueueOptions{PlaceTTL: multiPlaceTTL, Polling: p.polling},
		Observer:   observer,
	})
}

// expectSet fails unless Inspect reports every name of set held by its
// owner with the set's token for that name.
func expectSet(ctx context.Context, b driver.Backend, set *lock.MultiLease) error {
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
func takeWhenFree(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	deadline := time.Now().Add(waitFor)
	for {
		tok, err := take(ctx, b, name, owner, ttl)
		if err == nil {
			return tok, nil
		}
		if !errors.Is(err, driver.ErrHeld) || time.Now().After(deadline) {
			return 0, fmt.Errorf("Acquire(%q) by a bystander: %w (a waiter for a set must hold none of it while it waits)", name, err)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func checkMultiTokensRise(ctx context.Context, b driver.Backend, ns string, p setPath) error {
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
	if err := first(release(ctx, b, a, o), release(ctx, b, c, o)); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	client := multiClient(b, p, nil)
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

func checkMultiAllOrNothing(ctx context.Context, b driver.Backend, ns string, p setPath) error {
	a, mid, c := ns+"a", ns+"b", ns+"c"
	x := owner()
	tx, err := acquire(ctx, b, mid, x, longTTL)
	if err != nil {
		return err
	}
	client := multiClient(b, p, nil)
	_, err = client.TryAcquireMulti(ctx, []string{c, mid, a}, longTTL)
	if err := first(expectIs("TryAcquireMulti with one name held", err, lock.ErrHeld),
		expectIs("TryAcquireMulti with one name held", err, lock.ErrNotAcquired)); err != nil {
		return err
	}
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Name != mid {
		return fmt.Errorf("TryAcquireMulti with %q held: error %v; want a *driver.HeldError naming %q", mid, err, mid)
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
	if err := release(ctx, b, mid, x); err != nil {
		return fmt.Errorf("Release(%q) by its holder: %w", mid, err)
	}
	set, err := client.TryAcquireMulti(ctx, []string{a, mid, c}, longTTL)
	if err != nil {
		return fmt.Errorf("TryAcquireMulti once the set is free: %w", err)
	}
	return first(expectSet(ctx, b, set), set.Release(ctx))
}

func checkMultiWaiterHoldsNothing(ctx context.Context, b driver.Backend, ns string, p setPath) error {
	a, c := ns+"a", ns+"b"
	x, y, z := owner(), owner(), owner()
	tx, err := acquire(ctx, b, c, x, longTTL)
	if err != nil {
		return err
	}
	var retries atomic.Int64
	client := multiClient(b, p, &lock.Observer{Retrying: func(lock.Event) { retries.Add(1) }})
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
	if err := release(ctx, b, c, x); err != nil {
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
	if err := release(ctx, b, c, z); err != nil {
		return fmt.Errorf("Release(%q): %w", c, err)
	}
	yLetGo.Store(true)
	if err := release(ctx, b, a, y); err != nil {
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

func checkMultiOpposedOrders(ctx context.Context, b driver.Backend, ns string, p setPath) error {
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
		client := multiClient(b, p, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				// Each round waits for the other worker's, which takes a
				// few round trips: waitFor bounds it widely.
				rctx, cancel := context.WithTimeout(ctx, waitFor)
				err := client.DoMulti(rctx, order, longTTL, func(ctx context.Context, set *lock.MultiLease) error {
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
				cancel()
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

func checkMultiLossLosesSet(ctx context.Context, b driver.Backend, ns string, p setPath) error {
	a, c := ns+"a", ns+"b"
	client := multiClient(b, p, nil)
	// Renewals every 200ms of a 10s lease: the loss is seen soon, and a
	// freed by the set's release long before its TTL would run out.
	set, err := client.AcquireMulti(ctx, []string{a, c}, longTTL, lock.WithKeepAlive(true), lock.WithKeepAliveInterval(0.02))
	if err != nil {
		return fmt.Errorf("AcquireMulti: %w", err)
	}
	if err := release(ctx, b, c, set.Owner()); err != nil {
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

func checkMultiReleaseFreesAll(ctx context.Context, b driver.Backend, ns string, p setPath) error {
	names := []string{ns + "c", ns + "a", ns + "b"}
	client := multiClient(b, p, nil)
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

func checkMultiKeepAlive(ctx context.Context, b driver.Backend, ns string, p setPath) error {
	names := []string{ns + "a", ns + "b"}
	// Renewals every 100ms of a 10s lease: a loaded server has 9.9s to
	// answer each one.
	const ttl, past = longTTL, 300 * time.Millisecond
	client := multiClient(b, p, nil)
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

func checkMultiInvalid(ctx context.Context, b driver.Backend, ns string, p setPath) error {
	cb := &counted{Backend: b}
	client := multiClient(cb, p, nil)
	a := ns + "a"
	many := make([]string, driver.MaxNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("%s%d", ns, i)
	}
	for _, bad := range [][]string{nil, {}, {a, a}, {a, ""}, {a, a + "\x00"}, many} {
		what := fmt.Sprintf("(%d names %.40q)", len(bad), bad)
		if err := expectRefused(cb, []refusedCall{
			{"TryAcquireMulti" + what, func() error { _, err := client.TryAcquireMulti(ctx, bad, longTTL); return err }},
			{"AcquireMulti" + what, func() error { _, err := client.AcquireMulti(ctx, bad, longTTL); return err }},
			{"DoMulti" + what, func() error {
				return client.DoMulti(ctx, bad, longTTL, func(context.Context, *lock.MultiLease) error { return nil })
			}},
		}); err != nil {
			return err
		}
	}
	return expectFree(ctx, b, a)
}

// setRequest asks for every name of names for owner, all or nothing.
func setRequest(names []string, owner string, ttl time.Duration) driver.Request {
	return driver.Request{Names: names, Owner: owner, TTL: ttl, Kind: driver.Exclusive}
}

// checkSetAtomic: the driver takes a set in one step, all or nothing,
// with each name's own token, in the caller's order; a refused set changes
// nothing, not even a lease its owner held before; a same-owner retry keeps
// the tokens and renews every lease; the request's metadata is stored on
// every name. Or the driver answers driver.ErrNotAtomic and changes
// nothing.
func checkSetAtomic(ctx context.Context, b driver.Backend, ns string) error {
	a, mid, c := ns+"a", ns+"b", ns+"c"
	// Not sorted: Grant.Tokens come in this order, and each name's token
	// differs from the others', so that tokens in another order show.
	set := []string{c, a, mid}
	x, o := owner(), owner()
	var ta fence.Token
	for range 2 {
		tok, err := acquire(ctx, b, a, o, longTTL)
		if err != nil {
			return err
		}
		if err := release(ctx, b, a, o); err != nil {
			return fmt.Errorf("Release: %w", err)
		}
		ta = tok
	}
	// The owner already holds c: a refused set must leave it as it was.
	tc, wc, err := acquireTimed(ctx, b, c, o, longTTL)
	if err != nil {
		return err
	}
	tx, err := acquire(ctx, b, mid, x, longTTL)
	if err != nil {
		return err
	}
	unchanged := func(what string) error {
		if err := first(expectFree(ctx, b, a), expectHolder(ctx, b, mid, x, tx), expectLease(ctx, b, c, o, tc, longTTL, wc)); err != nil {
			return fmt.Errorf("%s (it must change nothing, not even a lease its owner held before): %w", what, err)
		}
		return nil
	}
	_, err = b.Acquire(ctx, setRequest(set, o, longTTL))
	if errors.Is(err, driver.ErrNotAtomic) {
		// Allowed (names in different Redis Cluster slots, say), if it
		// changed nothing.
		return first(unchanged("after Acquire of a set answered ErrNotAtomic"), release(ctx, b, mid, x), release(ctx, b, c, o))
	}
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Name != mid {
		return fmt.Errorf("Acquire of a set with %q held by another owner: %v; want a *driver.HeldError naming %q", mid, err, mid)
	}
	if err := unchanged("after a refused Acquire of a set"); err != nil {
		return err
	}
	if err := release(ctx, b, mid, x); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	g, err := b.Acquire(ctx, withMetadata(setRequest(set, o, longTTL), "set holder"))
	if err != nil {
		return fmt.Errorf("Acquire of a free set: %w", err)
	}
	tokens := g.Tokens
	if len(tokens) != 3 || tokens[0] != tc || tokens[1] <= ta || tokens[2] <= tx || g.Token != 0 {
		return fmt.Errorf("Acquire of the set %q: Grant.Tokens %v (Token %d); want 3 in the order of Names: %d (the lease its owner held), above %d, above %d", set, tokens, g.Token, tc, ta, tx)
	}
	for i, n := range set {
		if err := first(expectHolder(ctx, b, n, o, tokens[i]), expectMetadata(ctx, b, n, "set holder")); err != nil {
			return fmt.Errorf("after Acquire of the set %q with Grant.Tokens %v: %w", set, tokens, err)
		}
	}
	var again driver.Grant
	w := timed(func() { again, err = b.Acquire(ctx, setRequest(set, o, resumedTTL)) })
	if err != nil || !slices.Equal(again.Tokens, tokens) {
		return fmt.Errorf("Acquire of a set retried by the same owner = %v, %v; want the same tokens %v", again.Tokens, err, tokens)
	}
	for i, n := range set {
		if err := expectLease(ctx, b, n, o, tokens[i], resumedTTL, w); err != nil {
			return fmt.Errorf("after a same-owner Acquire of the set for %v (it must renew every lease): %w", resumedTTL, err)
		}
		if err := expectMetadata(ctx, b, n, ""); err != nil {
			return fmt.Errorf("after a same-owner Acquire of the set without metadata: %w", err)
		}
		if err := release(ctx, b, n, o); err != nil {
			return fmt.Errorf("Release(%q): %w", n, err)
		}
	}
	return nil
}

// Rounds of SetBystanderSeesNoPart: how many refused sets a bystander
// watches, at least.
const bystanderRounds = 20

// checkSetUnseenPart: no other caller sees a part of a set taken. While
// the driver refuses a set again and again (one of its names is held by
// another owner), a bystander inspecting the set's free names never finds
// one held. A backend that answers driver.ErrNotAtomic for the set has no
// one-step set to watch, and passes.
func checkSetUnseenPart(ctx context.Context, b driver.Backend, ns string) error {
	a, mid, c := ns+"a", ns+"b", ns+"c"
	x, o := owner(), owner()
	if _, err := acquire(ctx, b, mid, x, longTTL); err != nil {
		return err
	}
	defer release(context.WithoutCancel(ctx), b, mid, x)
	wctx, stop := context.WithCancel(ctx)
	var looks atomic.Int64
	seen := make(chan error, 1)
	go func() {
		defer close(seen)
		for wctx.Err() == nil {
			for _, n := range []string{a, c} {
				info, err := inspect(wctx, b, n)
				if wctx.Err() != nil {
					return
				}
				if err != nil {
					seen <- err
					return
				}
				if info.Held {
					seen <- fmt.Errorf("a bystander saw %q held by %q (token %d) while the set %q, refused, was being acquired by %q: no other caller may see a part of a set taken", n, info.Owner, info.Token, []string{a, mid, c}, o)
					return
				}
			}
			looks.Add(1)
		}
	}()
	defer func() { // the bystander is gone before the check returns
		stop()
		for range seen {
		}
	}()
	deadline := time.Now().Add(waitFor)
	for i := 0; i < bystanderRounds || looks.Load() < bystanderRounds; i++ {
		_, err := b.Acquire(ctx, setRequest([]string{a, mid, c}, o, longTTL))
		if i == 0 && errors.Is(err, driver.ErrNotAtomic) {
			return nil
		}
		var held *driver.HeldError
		if !errors.As(err, &held) || held.Name != mid {
			return fmt.Errorf("Acquire of a set with %q held by another owner: %v; want a *driver.HeldError naming %q", mid, err, mid)
		}
		select {
		case err := <-seen:
			return err
		default:
		}
		if time.Now().After(deadline) {
			break
		}
	}
	stop()
	if err := <-seen; err != nil {
		return err
	}
	return first(expectFree(ctx, b, a), expectFree(ctx, b, c))
}
