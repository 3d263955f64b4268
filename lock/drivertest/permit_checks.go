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

// Durations of the permit checks: places are renewed rarely (a third of
// permitPlaceTTL), so a waiter served well within waitFor was woken.
const (
	permitPlaceTTL = 30 * time.Second
	permitShortTTL = 300 * time.Millisecond // a permit that is left to expire
)

// permitChecks are the checks of permits (Kind Semaphore, Read and Write:
// semaphores and read-write locks), on the driver and through the Client's
// Semaphore and RWLock.
func permitChecks() []Check {
	checks := []Check{
		{"SemaphoreGrantsAtMostLimit", checkSemaphoreLimit},
		{"SemaphoreNeverOverLimitUnderContention", checkSemaphoreContention},
		{"SemaphoreRefusesAnotherLimit", checkSemaphoreShape},
		{"SemaphoreServesInArrivalOrder", checkSemaphoreOrder},
		{"SemaphorePermitExpires", checkPermitExpires},
		{"PermitTryDoesNotJumpTheLine", checkPermitNoJump},
		{"PermitSameOwnerKeepsToken", checkPermitSameOwner},
		{"PermitExtendNeverRecreates", checkPermitExtend},
		{"PermitNotHeldChangesNothing", checkPermitNotHeld},
		{"PermitLeaveLine", checkPermitLeave},
		{"PermitRenewalKeepsPlace", checkPermitRenewalKeepsPlace},
		{"PermitSkipsDeadWaiter", checkPermitSkipsDeadWaiter},
		{"PermitKeepsEarlyWakeUp", checkPermitKeepsEarlyWakeUp},
		{"PermitAwaitHonoursContext", checkPermitAwaitContext},
		{"PermitWakesBeforeRenewal", checkPermitWakesBeforeRenewal},
		{"PermitRefusesBadInput", checkPermitBadInput},
		{"PermitsApartFromLocks", checkPermitsApart},
		{"RWReadersShareWritersExclude", checkRWExclusion},
		{"RWWriterNotStarvedByReaders", checkRWWriterNotStarved},
		{"RWWriterReleaseWakesAllReaders", checkRWReleaseWakesAllReaders},
		{"RWReaderLearnsPriorWriter", checkRWPriorWriter},
		{"RWTokensRiseAcrossKinds", checkRWTokensRise},
	}
	for i := range checks {
		checks[i].Name = "Permits/" + checks[i].Name
	}
	return checks
}

// permitRequest asks for a permit of kind (a semaphore's of limit n) on
// name for owner, keeping owner's place in line for place when it is not
// admitted.
func permitRequest(name, owner string, kind driver.Kind, n int, ttl, place time.Duration) driver.Request {
	return driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: kind, Limit: n, Place: place}
}

// semaphoreReq asks for one of the n permits of the semaphore name.
func semaphoreReq(name, owner string, n int, ttl, place time.Duration) driver.Request {
	return permitRequest(name, owner, driver.Semaphore, n, ttl, place)
}

// permitClaim names owner's permit (or place) on the permit name: a
// semaphore's, for the contract lets any permit kind name any permit.
func permitClaim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: driver.Semaphore}
}

// inspectPermits asks b about the permit name called name, and fails
// unless the answer has a permit name's shape.
func inspectPermits(ctx context.Context, b driver.Backend, name string) (driver.Info, error) {
	info, err := b.Inspect(ctx, name, driver.Semaphore)
	if err != nil {
		return driver.Info{}, fmt.Errorf("Inspect(%q, Semaphore): %w", name, err)
	}
	switch {
	case info.Name != name:
		return info, fmt.Errorf("Inspect(%q, Semaphore) reported Name %q", name, info.Name)
	case info.Kind != 0 && info.Kind != driver.Semaphore && info.Kind != driver.Write:
		return info, fmt.Errorf("Inspect(%q, Semaphore) reported Kind %v; want 0 (idle), semaphore or write (a read-write lock)", name, info.Kind)
	case (info.Kind == driver.Semaphore) != (info.Limit > 0):
		return info, fmt.Errorf("Inspect(%q, Semaphore) reported Kind %v with Limit %d; a semaphore has a limit, nothing else does", name, info.Kind, info.Limit)
	case info.Kind == 0 && (len(info.Holders) > 0 || info.Waiting > 0):
		return info, fmt.Errorf("Inspect(%q, Semaphore) reported an idle name (Kind 0) with %d holders and %d waiting", name, len(info.Holders), info.Waiting)
	}
	for _, h := range info.Holders {
		if !h.Kind.Permit() || (info.Kind == driver.Semaphore) != (h.Kind == driver.Semaphore) {
			return info, fmt.Errorf("Inspect(%q, Semaphore) reported a holder of kind %v on a name of kind %v", name, h.Kind, info.Kind)
		}
	}
	return info, nil
}

// permitClient is a Client whose waiters renew their places rarely.
func permitClient(b driver.Backend) *lock.Client {
	return lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: permitPlaceTTL}})
}

// checkSemaphoreLimit: N permits are granted, the N+1-th is refused, and a
// release lets one more in, with a greater token.
func checkSemaphoreLimit(ctx context.Context, b driver.Backend, ns string) error {
	s := permitClient(b).Semaphore(ns+"sem", 3)
	var leases []*lock.Lease
	var last fence.Token
	for i := range 3 {
		l, err := s.TryAcquire(ctx, longTTL)
		if err != nil {
			return fmt.Errorf("permit %d of 3: %w", i+1, err)
		}
		if l.Token() <= last {
			return fmt.Errorf("permit %d has token %d, not above %d", i+1, l.Token(), last)
		}
		last = l.Token()
		leases = append(leases, l)
	}
	if l, err := s.TryAcquire(ctx, longTTL); err == nil {
		return fmt.Errorf("a 4th permit of 3 was granted (token %d)", l.Token())
	} else if err := expectIs("the 4th TryAcquire", err, lock.ErrHeld); err != nil {
		return err
	}
	if ps, err := s.Inspect(ctx); err != nil {
		return err
	} else if len(ps.Holders) != 3 || ps.Limit != 3 || ps.Waiting != 0 {
		return fmt.Errorf("Semaphore.Inspect: %d holders, limit %d, %d waiting; want 3, 3, 0", len(ps.Holders), ps.Limit, ps.Waiting)
	}
	if ps, err := inspectPermits(ctx, b, s.Name()); err != nil {
		return err
	} else if len(ps.Holders) != 3 || ps.Kind != driver.Semaphore || ps.Limit != 3 {
		return fmt.Errorf("Inspect: %d holders, kind %v, limit %d; want 3, semaphore, 3", len(ps.Holders), ps.Kind, ps.Limit)
	}
	if err := leases[1].Release(ctx); err != nil {
		return err
	}
	l, err := s.TryAcquire(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("after a release: %w", err)
	}
	if l.Token() <= last {
		return fmt.Errorf("the permit after a release has token %d, not above %d", l.Token(), last)
	}
	for _, l := range append(leases, l) {
		_ = l.Release(ctx)
	}
	return nil
}

// checkSemaphoreContention: many workers through Semaphore.Do, and never
// more than N of them inside at once.
func checkSemaphoreContention(ctx context.Context, b driver.Backend, ns string) error {
	const n, workers, rounds = 3, 12, 4
	s := permitClient(b).Semaphore(ns+"sem", n)
	var inside, most, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := s.Do(ctx, longTTL, func(ctx context.Context, _ *lock.Lease) error {
					now := inside.Add(1)
					defer inside.Add(-1)
					for {
						m := most.Load()
						if now <= m || most.CompareAndSwap(m, now) {
							break
						}
					}
					return sleep(ctx, 2*time.Millisecond)
				})
				if err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("Semaphore.Do: %w", err)
	}
	if most.Load() > n {
		return fmt.Errorf("%d workers held a permit of %d at once", most.Load(), n)
	}
	if done.Load() != workers*rounds {
		return fmt.Errorf("%d of %d rounds ran", done.Load(), workers*rounds)
	}
	return nil
}

// checkSemaphoreShape: while the semaphore is in use, another limit and a
// read-write lock of the same name are refused and change nothing; once it
// is idle, another limit is taken.
func checkSemaphoreShape(ctx context.Context, b driver.Backend, ns string) error {
	c := permitClient(b)
	name := ns + "sem"
	l, err := c.Semaphore(name, 3).TryAcquire(ctx, longTTL)
	if err != nil {
		return err
	}
	if _, err := c.Semaphore(name, 4).TryAcquire(ctx, longTTL); !errors.Is(err, lock.ErrShapeMismatch) {
		return fmt.Errorf("a semaphore of 3 asked for as one of 4: %v; want ErrShapeMismatch", err)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, owner(), 4, longTTL, permitPlaceTTL)); !errors.Is(err, driver.ErrShapeMismatch) {
		return fmt.Errorf("Acquire of a permit with another limit and a place: %v; want ErrShapeMismatch", err)
	}
	if _, err := c.RWLock(name).TryAcquireRead(ctx, longTTL); !errors.Is(err, lock.ErrShapeMismatch) {
		return fmt.Errorf("a semaphore asked for as a read-write lock: %v; want ErrShapeMismatch", err)
	}
	ps, err := inspectPermits(ctx, b, name)
	if err != nil {
		return err
	}
	if len(ps.Holders) != 1 || ps.Waiting != 0 || ps.Limit != 3 {
		return fmt.Errorf("after the refusals: %d holders, %d waiting, limit %d; want 1, 0, 3", len(ps.Holders), ps.Waiting, ps.Limit)
	}
	if err := l.Release(ctx); err != nil {
		return err
	}
	l4, err := c.Semaphore(name, 4).TryAcquire(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("an idle semaphore asked for with another limit: %w", err)
	}
	if l4.Token() <= l.Token() {
		return fmt.Errorf("token %d after a new limit, not above %d", l4.Token(), l.Token())
	}
	return l4.Release(ctx)
}

// startPermitWaiter starts acquire in the background, its place renewed
// rarely, and returns once it is in line (its first attempt refused) or it
// returned.
func startPermitWaiter(ctx context.Context, acquire func(ctx context.Context, c *lock.Client) (*lock.Lease, error), b driver.Backend) (*waiter, error) {
	return startAcquirer(ctx, b, permitPlaceTTL, acquire, nil)
}

// checkSemaphoreOrder: with one permit held, waiters are served in the
// order they arrived, each woken by the release before it.
func checkSemaphoreOrder(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	holder, err := permitClient(b).Semaphore(name, 1).TryAcquire(ctx, longTTL)
	if err != nil {
		return err
	}
	var ws []*waiter
	for range 3 {
		w, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
			return c.Semaphore(name, 1).Acquire(ctx, longTTL)
		}, b)
		if err != nil {
			return err
		}
		ws = append(ws, w)
	}
	prev := holder
	for i, w := range ws {
		if err := prev.Release(ctx); err != nil {
			return err
		}
		l, err := w.served(ctx, fmt.Sprintf("waiter %d", i+1))
		if err != nil {
			return err
		}
		for j, later := range ws[i+1:] {
			if !later.waiting() {
				return fmt.Errorf("waiter %d was served before waiter %d", i+j+2, i+1)
			}
		}
		if l.Token() <= prev.Token() {
			return fmt.Errorf("waiter %d has token %d, not above %d", i+1, l.Token(), prev.Token())
		}
		prev = l
	}
	return prev.Release(ctx)
}

// checkPermitExpires: a permit that is not renewed expires, and the waiter
// in line gets it with a greater token.
func checkPermitExpires(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	dead := owner()
	p, err := b.Acquire(ctx, semaphoreReq(name, dead, 1, permitShortTTL, 0))
	if err != nil {
		return err
	}
	w, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.Semaphore(name, 1).Acquire(ctx, longTTL)
	}, b)
	if err != nil {
		return err
	}
	l, err := w.served(ctx, "the waiter behind an expiring permit")
	if err != nil {
		return err
	}
	if l.Token() <= p.Token {
		return fmt.Errorf("token %d after expiry, not above %d", l.Token(), p.Token)
	}
	if err := expectIs("Extend of the expired permit", b.Extend(ctx, permitClaim(name, dead), longTTL), driver.ErrNotHeld); err != nil {
		return err
	}
	return l.Release(ctx)
}

// checkPermitNoJump: an acquire without a place does not take a permit
// that a waiter in line is owed, and the waiter then gets it.
func checkPermitNoJump(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	a, w, err := holdWithWaiter(ctx, b, name)
	if err != nil {
		return err
	}
	if err := b.Release(ctx, permitClaim(name, a)); err != nil {
		return err
	}
	if p, err := b.Acquire(ctx, semaphoreReq(name, owner(), 1, longTTL, 0)); err == nil {
		return fmt.Errorf("an acquire without a place took the permit (token %d) that the waiter in line is owed", p.Token)
	} else if err := expectIs("an acquire without a place", err, lock.ErrHeld); err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the waiter, first in line with the permit free: %w", err)
	}
	return b.Release(ctx, permitClaim(name, w))
}

// holdWithWaiter gives the one permit of a semaphore of one called name to
// a new owner and puts another in line behind it.
func holdWithWaiter(ctx context.Context, b driver.Backend, name string) (holder, waiter string, err error) {
	holder, waiter = owner(), owner()
	if _, err := b.Acquire(ctx, semaphoreReq(name, holder, 1, longTTL, 0)); err != nil {
		return "", "", err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, waiter, 1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return "", "", fmt.Errorf("Acquire of a permit with a place while the permit is held: %v; want ErrHeld", err)
	}
	return holder, waiter, nil
}

// checkPermitSameOwner: an acquire by the holder extends its permit with
// the same token and prior writer, a reader's as a writer's; asking for
// another kind is refused.
func checkPermitSameOwner(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "rw"
	o := owner()
	// A writer first, so that the reader has a prior writer to keep.
	first0, err := b.Acquire(ctx, permitRequest(name, o, driver.Write, 0, longTTL, 0))
	if err != nil {
		return err
	}
	if err := b.Release(ctx, permitClaim(name, o)); err != nil {
		return err
	}
	p1, err := b.Acquire(ctx, permitRequest(name, o, driver.Read, 0, permitShortTTL, 0))
	if err != nil {
		return err
	}
	p2, err := b.Acquire(ctx, permitRequest(name, o, driver.Read, 0, longTTL, 0))
	if err != nil {
		return err
	}
	if p2.Token != p1.Token || p2.PriorWriter != p1.PriorWriter || p1.PriorWriter == 0 || p2.Tokens != nil {
		return fmt.Errorf("a retried acquire got %+v; want the same permit %+v, with the writer before it", p2, p1)
	}
	if err := sleep(ctx, permitShortTTL+100*time.Millisecond); err != nil {
		return err
	}
	if err := b.Extend(ctx, permitClaim(name, o), longTTL); err != nil {
		return fmt.Errorf("the retried acquire did not extend the permit: %w", err)
	}
	if _, err := b.Acquire(ctx, permitRequest(name, o, driver.Write, 0, longTTL, 0)); !errors.Is(err, driver.ErrShapeMismatch) {
		return fmt.Errorf("a reader asking for the write permit: %v; want ErrShapeMismatch", err)
	}
	if err := b.Release(ctx, permitClaim(name, o)); err != nil {
		return err
	}
	// A writer's retry is a retry too: its prior writer is the one before
	// it, never the writer itself (which is now the name's last writer).
	w1, err := b.Acquire(ctx, permitRequest(name, o, driver.Write, 0, longTTL, 0))
	if err != nil {
		return err
	}
	w2, err := b.Acquire(ctx, permitRequest(name, o, driver.Write, 0, longTTL, 0))
	if err != nil {
		return fmt.Errorf("a writer's retried acquire: %w", err)
	}
	if w1.PriorWriter != first0.Token || w2.Token != w1.Token || w2.PriorWriter != w1.PriorWriter {
		return fmt.Errorf("a writer's acquire got %+v and its retry %+v; want the same permit twice, with prior writer %d (the writer before it), never its own token", w1, w2, first0.Token)
	}
	return b.Release(ctx, permitClaim(name, o))
}

// checkPermitExtend: Extend renews the owner's live permit to the TTL it
// asks for; Extend and Release of a permit that is gone (released, never
// held) are ErrNotHeld and bring nothing back. (An expired one:
// PermitNotHeldChangesNothing.)
func checkPermitExtend(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	o := owner()
	if _, err := b.Acquire(ctx, semaphoreReq(name, o, 2, longTTL, 0)); err != nil {
		return err
	}
	var err error
	w := timed(func() { err = b.Extend(ctx, permitClaim(name, o), resumedTTL) })
	if err != nil {
		return fmt.Errorf("Extend of a live permit: %w", err)
	}
	if err := expectPermitTTL(ctx, b, name, o, resumedTTL, w); err != nil {
		return fmt.Errorf("after Extend of a permit to %v: %w", resumedTTL, err)
	}
	if err := b.Release(ctx, permitClaim(name, o)); err != nil {
		return err
	}
	if err := expectIs("Extend of a permit after its release", b.Extend(ctx, permitClaim(name, o), longTTL), driver.ErrNotHeld); err != nil {
		return err
	}
	if err := expectIs("Release of a permit twice", b.Release(ctx, permitClaim(name, o)), driver.ErrNotHeld); err != nil {
		return err
	}
	if err := expectIs("Extend of a permit by a stranger", b.Extend(ctx, permitClaim(name, owner()), longTTL), driver.ErrNotHeld); err != nil {
		return err
	}
	return expectPermitHolders(ctx, b, name, "after release and extend")
}

// permitExpiryTTL is the TTL of a permit a check waits out (or the
// backend's TTL granularity, when coarser).
const permitExpiryTTL = 100 * time.Millisecond

// expectPermitTTL fails unless Inspect reports owner holding a permit of
// name whose remaining TTL fits one granted (or renewed) for ttl by the
// call in window granted.
func expectPermitTTL(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration, granted window) error {
	var ps driver.Info
	var err error
	at := timed(func() { ps, err = inspectPermits(ctx, b, name) })
	if err != nil {
		return err
	}
	for _, h := range ps.Holders {
		if h.Owner == owner {
			return ttlWithinGranular("Inspect of a permit", h.TTL, ttl, granularity(ctx), granted, at)
		}
	}
	return fmt.Errorf("Inspect(%q) reported holders %+v; want one of them %s", name, ps.Holders, owner)
}

// waitPermitGone polls until Inspect no longer reports owner's permit of
// name, granted for ttl, failing after waitFor past its TTL.
func waitPermitGone(ctx context.Context, b driver.Backend, name, owner string, ttl time.Duration) error {
	deadline := time.Now().Add(ttl + waitFor)
	for {
		ps, err := inspectPermits(ctx, b, name)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ps.Holders, func(h driver.Holder) bool { return h.Owner == owner }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a permit of %q granted for %v was still reported %v after its TTL", name, ttl, waitFor)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// expectPermitHolders fails unless Inspect reports exactly owners holding
// permits of name.
func expectPermitHolders(ctx context.Context, b driver.Backend, name, what string, owners ...string) error {
	ps, err := inspectPermits(ctx, b, name)
	if err != nil {
		return err
	}
	var got []string
	for _, h := range ps.Holders {
		got = append(got, h.Owner)
	}
	want := slices.Clone(owners)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("Inspect(%q) %s: holders %q; want %q", name, what, got, want)
	}
	return nil
}

// checkPermitNotHeld: a Release or Extend answered ErrNotHeld changes
// nothing. A second release of a permit, and the release of one that
// expired, leave the other holders' permits in place and the semaphore as
// full as it was (a stranger is still refused); Extend of an expired
// permit does not revive it.
func checkPermitNotHeld(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	a, c, d := owner(), owner(), owner()
	if _, err := b.Acquire(ctx, semaphoreReq(name, a, 2, longTTL, 0)); err != nil {
		return err
	}
	if err := b.Release(ctx, permitClaim(name, a)); err != nil {
		return err
	}
	for _, o := range []string{c, d} {
		if _, err := b.Acquire(ctx, semaphoreReq(name, o, 2, longTTL, 0)); err != nil {
			return err
		}
	}
	full := func(what string, owners ...string) error {
		if err := expectPermitHolders(ctx, b, name, what, owners...); err != nil {
			return fmt.Errorf("%w: a Release answered ErrNotHeld must free nothing", err)
		}
		if g, err := b.Acquire(ctx, semaphoreReq(name, owner(), 2, longTTL, 0)); err == nil {
			return fmt.Errorf("%s: a stranger took a permit (token %d) of a semaphore of 2 whose holders are %q: a Release answered ErrNotHeld freed a slot", what, g.Token, owners)
		} else if err := expectIs("an acquire of the full semaphore "+what, err, driver.ErrHeld); err != nil {
			return err
		}
		return nil
	}
	if err := expectIs("Release of a permit twice", b.Release(ctx, permitClaim(name, a)), driver.ErrNotHeld); err != nil {
		return err
	}
	if err := full("after a second release of another permit", c, d); err != nil {
		return err
	}
	// The release of a permit that expired.
	if err := b.Release(ctx, permitClaim(name, d)); err != nil {
		return err
	}
	e, f := owner(), owner()
	ttl := max(permitExpiryTTL, granularity(ctx))
	if _, err := b.Acquire(ctx, semaphoreReq(name, e, 2, ttl, 0)); err != nil {
		return err
	}
	if err := waitPermitGone(ctx, b, name, e, ttl); err != nil {
		return err
	}
	if err := expectIs("Extend of an expired permit", b.Extend(ctx, permitClaim(name, e), longTTL), driver.ErrNotHeld); err != nil {
		return err
	}
	if err := expectPermitHolders(ctx, b, name, "after Extend of an expired permit (it must not revive it)", c); err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, f, 2, longTTL, 0)); err != nil {
		return err
	}
	if err := expectIs("Release of an expired permit", b.Release(ctx, permitClaim(name, e)), driver.ErrNotHeld); err != nil {
		return err
	}
	if err := full("after the release of an expired permit", c, f); err != nil {
		return err
	}
	return first(b.Release(ctx, permitClaim(name, c)), b.Release(ctx, permitClaim(name, f)))
}

// checkPermitLeave: Leave removes its owner's own place and nothing else
// (not another waiter's place, not a holder's permit), and is nil for an
// owner without a place; a waiter asking twice has one place.
func checkPermitLeave(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	a, w, err := holdWithWaiter(ctx, b, name)
	if err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("queueing again: %v; want ErrHeld", err)
	}
	if ps, err := inspectPermits(ctx, b, name); err != nil || ps.Waiting != 1 {
		return first(err, fmt.Errorf("one waiter asked twice: %d waiting; want 1", ps.Waiting))
	}
	v := owner()
	if _, err := b.Acquire(ctx, semaphoreReq(name, v, 1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a second waiter: %v; want ErrHeld", err)
	}
	if err := b.Leave(ctx, permitClaim(name, owner())); err != nil {
		return fmt.Errorf("Leave without a place: %w", err)
	}
	if err := b.Leave(ctx, permitClaim(name, a)); err != nil {
		return fmt.Errorf("Leave by the holder, without a place: %w", err)
	}
	if ps, err := inspectPermits(ctx, b, name); err != nil || ps.Waiting != 2 {
		return first(err, fmt.Errorf("after Leave by a stranger and by the holder, neither in line: %d waiting; want 2: Leave must remove nobody else's place", ps.Waiting))
	}
	if err := expectPermitHolders(ctx, b, name, "after Leave by the holder (Leave must not free a permit)", a); err != nil {
		return err
	}
	if err := b.Leave(ctx, permitClaim(name, v)); err != nil {
		return err
	}
	if ps, err := inspectPermits(ctx, b, name); err != nil || ps.Waiting != 1 {
		return first(err, fmt.Errorf("after Leave: %d waiting; want 1", ps.Waiting))
	}
	// The one left in line is the first, which Leave did not touch.
	if err := b.Release(ctx, permitClaim(name, a)); err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the first in line, after the second left and the permit was freed: %w (Leave must remove its owner's place, not another's)", err)
	}
	if ps, err := inspectPermits(ctx, b, name); err != nil || ps.Waiting != 0 {
		return first(err, fmt.Errorf("after the last waiter was served: %d waiting; want 0", ps.Waiting))
	}
	return b.Release(ctx, permitClaim(name, w))
}

// checkPermitRenewalKeepsPlace: a waiter that asks again with a place (the
// Client renews its place so) keeps where it stands: after the two waiters
// renewed in turn, the first to queue is still the first served.
func checkPermitRenewalKeepsPlace(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	h, a, err := holdWithWaiter(ctx, b, name)
	if err != nil {
		return err
	}
	c := owner()
	for i, who := range []string{c, a, c, a} {
		if _, err := b.Acquire(ctx, semaphoreReq(name, who, 1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
			return fmt.Errorf("Acquire with a place %d while the permit is held: %v; want ErrHeld", i+1, err)
		}
	}
	if err := b.Release(ctx, permitClaim(name, h)); err != nil {
		return err
	}
	if g, err := b.Acquire(ctx, semaphoreReq(name, c, 1, longTTL, permitPlaceTTL)); err == nil {
		return fmt.Errorf("the second in line took the free permit (token %d) ahead of the first: a renewal of its place moved the first in line back", g.Token)
	} else if !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("the second in line, the permit free: %v; want ErrHeld", err)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, a, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the first in line, which renewed its place twice, the permit free: %w", err)
	}
	if err := b.Release(ctx, permitClaim(name, a)); err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, c, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the second in line, once the first was served: %w", err)
	}
	return b.Release(ctx, permitClaim(name, c))
}

// checkPermitSkipsDeadWaiter: a place that is not renewed runs out (not
// before its TTL), and one that is renewed lasts: behind the holder wait a
// waiter that queued once and stopped (dead), one that renews its place
// often (live) and a third; once the dead place has run out and the live
// one has outlived its first TTL, the release lets the live waiter in
// first, then the third.
func checkPermitSkipsDeadWaiter(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	h, dead, live, w := owner(), owner(), owner(), owner()
	if _, err := b.Acquire(ctx, semaphoreReq(name, h, 1, longTTL, 0)); err != nil {
		return err
	}
	place := max(deadPlaceTTL, granularity(ctx))
	livePlace := 2 * place
	queue := func(who string, place time.Duration) (window, error) {
		var err error
		at := timed(func() { _, err = b.Acquire(ctx, semaphoreReq(name, who, 1, longTTL, place)) })
		if !errors.Is(err, lock.ErrHeld) {
			return at, fmt.Errorf("Acquire with a place while the permit is held: %v; want ErrHeld", err)
		}
		return at, nil
	}
	placed, err := queue(dead, place)
	if err != nil {
		return err
	}
	liveSince, err := queue(live, livePlace)
	if err != nil {
		return err
	}
	if _, err := queue(w, permitPlaceTTL); err != nil {
		return err
	}
	// The live waiter renews every place/8 until the dead place is gone
	// and its own first TTL is past by half a place.
	deadline := placed.ret.Add(place + waitFor)
	for gone := false; !gone || time.Since(liveSince.ret) < livePlace+place/2; {
		if _, err := queue(live, livePlace); err != nil {
			return fmt.Errorf("the live waiter renewing: %w", err)
		}
		var ps driver.Info
		at := timed(func() { ps, err = inspectPermits(ctx, b, name) })
		if err != nil {
			return err
		}
		switch {
		case ps.Waiting > 3 || ps.Waiting < 2:
			return fmt.Errorf("Inspect(%q) with three waiters, one of them dead: %d waiting; want 3, then 2 once the dead place ran out", name, ps.Waiting)
		case ps.Waiting == 2 && at.ret.Before(placed.call.Add(place-granularity(ctx)-tolerance)):
			return fmt.Errorf("a place kept for %v was dropped after at most %v: a place must last its whole TTL", place, at.ret.Sub(placed.call))
		case ps.Waiting == 3 && at.ret.After(deadline):
			return fmt.Errorf("the place of a waiter that stopped renewing, kept for %v, was still in line %v later: a place not renewed must expire", place, at.ret.Sub(placed.call).Round(time.Millisecond))
		}
		gone = ps.Waiting == 2
		if err := sleep(ctx, place/8); err != nil {
			return err
		}
	}
	// One more renewal, so that only the release and the next call stand
	// between it and the third waiter's attempt: on a loaded machine the
	// loop's last Inspect and sleep took most of a place TTL (CI saw
	// MariaDB lose the live place so). A backend whose renewals do not move
	// the expiry lost that place a TTL after it queued, long before.
	if _, err := queue(live, livePlace); err != nil {
		return fmt.Errorf("the live waiter renewing: %w", err)
	}
	if err := b.Release(ctx, permitClaim(name, h)); err != nil {
		return err
	}
	if g, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); err == nil {
		return fmt.Errorf("the third waiter took the free permit (token %d) ahead of one that renewed its place every %v (a place of %v): a renewal must keep the place for its TTL from now", g.Token, place/8, livePlace)
	} else if !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("the third waiter, behind the live one: %v; want ErrHeld", err)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, live, 1, longTTL, livePlace)); err != nil {
		return fmt.Errorf("the live waiter, first in line once the dead place ran out: %w", err)
	}
	if err := b.Release(ctx, permitClaim(name, live)); err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the last waiter: %w", err)
	}
	if ps, err := inspectPermits(ctx, b, name); err != nil || ps.Waiting != 0 {
		return first(err, fmt.Errorf("after every waiter was served: %d waiting; want 0", ps.Waiting))
	}
	return b.Release(ctx, permitClaim(name, w))
}

// checkPermitKeepsEarlyWakeUp: a wake-up sent before the waiter calls Await
// is not lost: the waiter's Await after the release that let it in returns
// at once, not at its max.
func checkPermitKeepsEarlyWakeUp(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	h, w, err := holdWithWaiter(ctx, b, name)
	if err != nil {
		return err
	}
	defer b.Leave(context.WithoutCancel(ctx), permitClaim(name, w))
	if err := b.Release(ctx, permitClaim(name, h)); err != nil {
		return err
	}
	returned := make(chan error, 1)
	go func() { returned <- b.Await(ctx, permitClaim(name, w), slowRenewal) }()
	select {
	case err := <-returned:
		if err != nil {
			return fmt.Errorf("Await of a permit after a wake-up: %w", err)
		}
	case <-time.After(waitFor):
		return fmt.Errorf("Await of a permit called after the release that woke it did not return within %v: the wake-up was lost", waitFor)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the woken first in line: %w", err)
	}
	return b.Release(ctx, permitClaim(name, w))
}

// checkPermitAwaitContext: Await of a permit returns the context's error when
// the context ends.
func checkPermitAwaitContext(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	a, w, err := holdWithWaiter(ctx, b, name)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = b.Await(actx, permitClaim(name, w), longTTL)
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Await of a permit past its context's deadline: %v; want context.DeadlineExceeded", err)
	}
	_ = b.Leave(ctx, permitClaim(name, w))
	return b.Release(ctx, permitClaim(name, a))
}

// checkPermitBadInput: bad requests through the Client are ErrInvalid,
// send nothing and write nothing.
func checkPermitBadInput(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "sem"
	cb := &counted{Backend: b}
	c := lock.New(cb, nil)
	short := lock.New(cb, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: driver.MinPlaceTTL / 2}})
	if err := expectRefused(cb, []refusedCall{
		{"a semaphore of 0 permits", func() error { _, err := c.Semaphore(name, 0).TryAcquire(ctx, longTTL); return err }},
		{"a semaphore of more than MaxPermits", func() error { _, err := c.Semaphore(name, driver.MaxPermits+1).Acquire(ctx, longTTL); return err }},
		{"a permit with a ttl below MinTTL", func() error { _, err := c.Semaphore(name, 1).TryAcquire(ctx, 0); return err }},
		{"a read permit with a ttl below MinTTL", func() error { _, err := c.RWLock(name).AcquireRead(ctx, 0); return err }},
		{"a place below the minimum", func() error { _, err := short.Semaphore(name, 1).Acquire(ctx, longTTL); return err }},
		{"a write permit with a place below the minimum", func() error { _, err := short.RWLock(name).AcquireWrite(ctx, longTTL); return err }},
		{"a permit of an empty name", func() error { _, err := c.Semaphore("", 1).TryAcquire(ctx, longTTL); return err }},
		{"Semaphore.Do of an empty name", func() error {
			return c.Semaphore("", 1).Do(ctx, longTTL, func(context.Context, *lock.Lease) error { return nil })
		}},
	}); err != nil {
		return err
	}
	ps, err := inspectPermits(ctx, b, name)
	if err != nil {
		return err
	}
	if ps.Kind != 0 || len(ps.Holders) != 0 || ps.Waiting != 0 {
		return fmt.Errorf("after refused requests: kind %v, %d holders, %d waiting; want nothing", ps.Kind, len(ps.Holders), ps.Waiting)
	}
	return nil
}

// checkPermitsApart: a lock and a semaphore (or a read-write lock) of the
// same name do not block each other, nor share a line.
func checkPermitsApart(ctx context.Context, b driver.Backend, ns string) error {
	c := permitClient(b)
	name := ns + "x"
	l, err := c.TryAcquire(ctx, name, longTTL)
	if err != nil {
		return err
	}
	s, err := c.Semaphore(name, 1).TryAcquire(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("a semaphore named as a held lock: %w", err)
	}
	w, err := c.RWLock(ns+"y").TryAcquireWrite(ctx, longTTL)
	if err != nil {
		return err
	}
	l2, err := c.TryAcquire(ctx, ns+"y", longTTL)
	if err != nil {
		return fmt.Errorf("a lock named as a held read-write lock: %w", err)
	}
	// Their lines are apart too: a waiter for the lock is not counted in
	// the semaphore's line, nor the other way round.
	lw, sw := owner(), owner()
	if _, err := enqueue(ctx, b, name, lw, longTTL, permitPlaceTTL); !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire of the held lock with a place: %v; want ErrHeld", err)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, sw, 1, longTTL, permitPlaceTTL)); !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire of the full semaphore with a place: %v; want ErrHeld", err)
	}
	li, err := inspect(ctx, b, name)
	if err != nil {
		return err
	}
	pi, err := inspectPermits(ctx, b, name)
	if err != nil {
		return err
	}
	if li.Waiting != 1 || pi.Waiting != 1 {
		return fmt.Errorf("one waiter for the lock %q and one for the semaphore %q: Inspect reports %d and %d waiting; want 1 and 1", name, name, li.Waiting, pi.Waiting)
	}
	return first(b.Leave(ctx, lockClaim(name, lw)), b.Leave(ctx, permitClaim(name, sw)),
		l.Release(ctx), s.Release(ctx), w.Release(ctx), l2.Release(ctx))
}

// checkRWExclusion: readers share, a writer excludes readers and writers.
func checkRWExclusion(ctx context.Context, b driver.Backend, ns string) error {
	rw := permitClient(b).RWLock(ns + "rw")
	r1, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	r2, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("a second reader: %w", err)
	}
	if _, err := rw.TryAcquireWrite(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a writer beside two readers: %v; want ErrHeld", err)
	}
	if err := first(r1.Release(ctx), r2.Release(ctx)); err != nil {
		return err
	}
	w, err := rw.TryAcquireWrite(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("a writer once the readers left: %w", err)
	}
	if _, err := rw.TryAcquireRead(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a reader beside a writer: %v; want ErrHeld", err)
	}
	if _, err := rw.TryAcquireWrite(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a second writer: %v; want ErrHeld", err)
	}
	return w.Release(ctx)
}

// checkRWWriterNotStarved: once a writer waits, new readers wait behind
// it; the writer is served when the readers ahead of it leave, and the
// readers behind it after the writer.
func checkRWWriterNotStarved(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "rw"
	rw := permitClient(b).RWLock(name)
	r1, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	writer, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.RWLock(name).AcquireWrite(ctx, longTTL)
	}, b)
	if err != nil {
		return err
	}
	if _, err := rw.TryAcquireRead(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a new reader while a writer waits: %v; want ErrHeld", err)
	}
	reader, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.RWLock(name).AcquireRead(ctx, longTTL)
	}, b)
	if err != nil {
		return err
	}
	if !reader.waiting() {
		return fmt.Errorf("a reader behind a waiting writer was served (err %v)", reader.err)
	}
	if err := r1.Release(ctx); err != nil {
		return err
	}
	w, err := writer.served(ctx, "the writer after the reader left")
	if err != nil {
		return err
	}
	if !reader.waiting() {
		return fmt.Errorf("the reader behind the writer was served while the writer holds the lock (err %v)", reader.err)
	}
	if err := w.Release(ctx); err != nil {
		return err
	}
	r, err := reader.served(ctx, "the reader after the writer")
	if err != nil {
		return err
	}
	if r.Token() <= w.Token() || r.PriorWriter() != w.Token() {
		return fmt.Errorf("the reader after the writer: token %d, prior writer %d; want above %d and %d", r.Token(), r.PriorWriter(), w.Token(), w.Token())
	}
	return r.Release(ctx)
}

// checkRWReleaseWakesAllReaders: a writer's release lets in every reader
// waiting behind it, and wakes them all: each is served within promptWake
// of the release, not at its renewal seconds later, with the writer as its
// prior writer, and they hold the lock together.
func checkRWReleaseWakesAllReaders(ctx context.Context, b driver.Backend, ns string) error {
	const readers = 3
	name := ns + "rw"
	wl, err := permitClient(b).RWLock(name).TryAcquireWrite(ctx, longTTL)
	if err != nil {
		return err
	}
	servedAt := make([]time.Time, readers)
	ws := make([]*waiter, readers)
	for i := range ws {
		w, err := startAcquirer(ctx, b, promptPlaceTTL, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
			return c.RWLock(name).AcquireRead(ctx, longTTL)
		}, func(*lock.Lease) { servedAt[i] = time.Now() })
		if err != nil {
			return err
		}
		defer w.cancel()
		ws[i] = w
	}
	if err := sleep(ctx, promptSettle); err != nil {
		return err
	}
	at := time.Now()
	if err := wl.Release(ctx); err != nil {
		return err
	}
	var leases []*lock.Lease
	defer func() {
		for _, l := range leases {
			_ = l.Release(context.WithoutCancel(ctx))
		}
	}()
	for i, w := range ws {
		l, err := w.served(ctx, fmt.Sprintf("reader %d of %d behind a writer", i+1, readers))
		if err != nil {
			return err
		}
		leases = append(leases, l)
		if took := servedAt[i].Sub(at); took >= promptWake {
			return fmt.Errorf("reader %d of %d waiting behind a writer was served %v after the writer's release (it renews its place every %v): want within %v: a release must wake every reader it lets in", i+1, readers, took.Round(time.Millisecond), promptPlaceTTL/3, promptWake)
		}
		if l.PriorWriter() != wl.Token() || l.Token() <= wl.Token() {
			return fmt.Errorf("reader %d after the writer: token %d, prior writer %d; want above %d and %d", i+1, l.Token(), l.PriorWriter(), wl.Token(), wl.Token())
		}
	}
	ps, err := inspectPermits(ctx, b, name)
	if err != nil {
		return err
	}
	if len(ps.Holders) != readers || ps.Waiting != 0 {
		return fmt.Errorf("after the writer's release: %d holders, %d waiting; want the %d readers together, nobody waiting", len(ps.Holders), ps.Waiting, readers)
	}
	return nil
}

// checkRWPriorWriter: a reader's PriorWriter is the newest writer before
// it, and it survives the lock going idle.
func checkRWPriorWriter(ctx context.Context, b driver.Backend, ns string) error {
	rw := permitClient(b).RWLock(ns + "rw")
	r0, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	if r0.PriorWriter() != 0 {
		return fmt.Errorf("the first reader's prior writer is %d; want 0", r0.PriorWriter())
	}
	if err := r0.Release(ctx); err != nil {
		return err
	}
	var last fence.Token
	for i := range 2 {
		w, err := rw.TryAcquireWrite(ctx, longTTL)
		if err != nil {
			return err
		}
		if w.PriorWriter() != last {
			return fmt.Errorf("writer %d's prior writer is %d; want %d", i+1, w.PriorWriter(), last)
		}
		last = w.Token()
		if err := w.Release(ctx); err != nil {
			return err
		}
		r, err := rw.TryAcquireRead(ctx, longTTL)
		if err != nil {
			return err
		}
		if r.PriorWriter() != last {
			return fmt.Errorf("the reader after writer %d has prior writer %d; want %d", i+1, r.PriorWriter(), last)
		}
		if err := r.Release(ctx); err != nil {
			return err
		}
	}
	ps, err := rw.Inspect(ctx)
	if err != nil {
		return err
	}
	if ps.LastWriter != last {
		return fmt.Errorf("Inspect: last writer %d; want %d", ps.LastWriter, last)
	}
	return nil
}

// checkRWTokensRise: tokens rise across readers and writers, and after the
// lock was idle.
func checkRWTokensRise(ctx context.Context, b driver.Backend, ns string) error {
	rw := permitClient(b).RWLock(ns + "rw")
	var last fence.Token
	for i, write := range []bool{false, false, true, false, true, true} {
		acquire := rw.TryAcquireRead
		if write {
			acquire = rw.TryAcquireWrite
		}
		l, err := acquire(ctx, longTTL)
		if err != nil {
			return fmt.Errorf("acquire %d: %w", i+1, err)
		}
		if l.Token() <= last {
			return fmt.Errorf("acquire %d (write %v) has token %d, not above %d", i+1, write, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// checkPermitWakesBeforeRenewal: a release that frees a permit wakes the
// waiter it lets in at once (a semaphore's, as it starts to wait and while
// it waits; a writer's behind two readers, at the second release), and so
// does a Leave by the first in line for the next: each is served within
// promptWake, not at its renewal seconds later (see promptly).
func checkPermitWakesBeforeRenewal(ctx context.Context, b driver.Backend, ns string) error {
	c := permitClient(b)
	semaphore := func(name string) func(context.Context, *lock.Client) (*lock.Lease, error) {
		return func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
			return c.Semaphore(name, 1).Acquire(ctx, longTTL)
		}
	}
	for i, settle := range []time.Duration{promptSettle, 0} {
		name := fmt.Sprintf("%ssem%d", ns, i)
		h, err := c.Semaphore(name, 1).TryAcquire(ctx, longTTL)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("the waiter of a semaphore of 1 whose holder releases %v after it queued", settle)
		l, err := promptly(ctx, b, what, settle, semaphore(name), func() error { return h.Release(ctx) })
		if err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}

	name := ns + "rw"
	rw := c.RWLock(name)
	r1, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	r2, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	l, err := promptly(ctx, b, "a writer behind two readers, both released", promptSettle,
		func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
			return c.RWLock(name).AcquireWrite(ctx, longTTL)
		},
		func() error { return first(r1.Release(ctx), r2.Release(ctx)) })
	if err != nil {
		return err
	}
	if err := l.Release(ctx); err != nil {
		return err
	}

	// The first in line leaves once the permit is free: the next is let in.
	name = ns + "leave"
	a, w, err := holdWithWaiter(ctx, b, name)
	if err != nil {
		return err
	}
	defer b.Leave(context.WithoutCancel(ctx), permitClaim(name, w))
	if err := b.Release(ctx, permitClaim(name, a)); err != nil {
		return err
	}
	l, err = promptly(ctx, b, "the waiter of a semaphore of 1 behind a first in line that leaves", promptSettle, semaphore(name), func() error {
		return b.Leave(ctx, permitClaim(name, w))
	})
	if err != nil {
		return err
	}
	return l.Release(ctx)
}
