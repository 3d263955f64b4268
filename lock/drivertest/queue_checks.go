package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Durations of the queue checks. Waiters renew their places rarely
// (slowRenewal is a third of their place TTL), so a waiter that gets the
// lock well within waitFor was woken, not served by its own renewal: the
// checks judge wake-ups by that wide gap, never by a tight latency.
const (
	queuePlaceTTL = 30 * time.Second
	slowRenewal   = queuePlaceTTL / 3
	deadPlaceTTL  = 200 * time.Millisecond // the place of a waiter that stops renewing
	livePlaceTTL  = 600 * time.Millisecond // a waiter that renews every 200ms
	expiringTTL   = 300 * time.Millisecond // a holder that never releases
	queueWaiters  = 5
)

// queueChecks are the checks of queued waiting on a lock (Request.Place,
// Await, Leave), on the driver and through the Client's Acquire.
func queueChecks() []Check {
	return []Check{
		{"QueueServesInArrivalOrder", checkQueueOrder},
		{"QueueWakesAtHolderExpiry", checkQueueWakeAtExpiry},
		{"QueueSkipsDeadWaiter", checkQueueSkipsDeadWaiter},
		{"QueueSkipsCancelledWaiter", checkQueueSkipsCancelledWaiter},
		{"QueueLeaveWakesNext", checkQueueLeaveWakesNext},
		{"QueueKeepsEarlyWakeUp", checkQueueKeepsEarlyWakeUp},
		{"QueuePlaceIsIdempotent", checkQueueIdempotent},
		{"QueueAwaitHonoursContext", checkAwaitContext},
		{"QueueInspectReportsWaiting", checkQueueInspectWaiting},
		{"QueueWakesBeforeRenewal", checkQueueWakesBeforeRenewal},
	}
}

// placeRequest asks for the lock name for owner, keeping owner's place in
// line for place when it is not admitted.
func placeRequest(name, owner string, ttl, place time.Duration) driver.Request {
	req := lockRequest(name, owner, ttl)
	req.Place = place
	return req
}

// enqueue asks b for the lock name for owner with a place in line.
func enqueue(ctx context.Context, b driver.Backend, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	g, err := b.Acquire(ctx, placeRequest(name, owner, ttl, place))
	return g.Token, err
}

// waiter is a Client.Acquire running in the background.
type waiter struct {
	queued chan struct{} // closed when its first attempt was refused: it is in line
	done   chan struct{} // closed when Acquire returned
	lease  *lock.Lease
	err    error
	cancel context.CancelFunc
}

// startWaiter starts Client.Acquire of name on b, its place renewed every
// third of placeTTL, and returns once the waiter is in line (its first
// attempt refused) or Acquire returned.
func startWaiter(ctx context.Context, b driver.Backend, name string, placeTTL time.Duration, then func(*lock.Lease)) (*waiter, error) {
	return startAcquirer(ctx, b, placeTTL, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.Acquire(ctx, name, longTTL)
	}, then)
}

// startAcquirer is startWaiter for any blocking acquire through a Client
// on b (a semaphore's or a read-write lock's, say).
func startAcquirer(ctx context.Context, b driver.Backend, placeTTL time.Duration, acquire func(ctx context.Context, c *lock.Client) (*lock.Lease, error), then func(*lock.Lease)) (*waiter, error) {
	w := &waiter{queued: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	c := lock.New(b, &lock.Options{
		Queue: lock.QueueOptions{PlaceTTL: placeTTL},
		Observer: &lock.Observer{Retrying: func(lock.Event) {
			once.Do(func() { close(w.queued) })
		}},
	})
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.lease, w.err = acquire(wctx, c)
		if w.err == nil && then != nil {
			then(w.lease)
		}
	}()
	select {
	case <-w.queued:
		return w, nil
	case <-w.done:
		return w, nil
	case <-time.After(waitFor):
		cancel()
		return nil, fmt.Errorf("a waiter was not refused (queued) within %v of starting", waitFor)
	}
}

// waiting says whether w's acquire has not returned yet.
func (w *waiter) waiting() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// served waits for w's Acquire to return with a lease, failing after
// waitFor: a waiter that was woken returns long before its renewal.
func (w *waiter) served(ctx context.Context, what string) (*lock.Lease, error) {
	if err := waitChan(ctx, w.done, what+" acquiring"); err != nil {
		return nil, fmt.Errorf("%w: it was not woken", err)
	}
	if w.err != nil {
		return nil, fmt.Errorf("%s: Acquire: %w", what, w.err)
	}
	return w.lease, nil
}

func checkQueueOrder(ctx context.Context, b driver.Backend, ns string) error {
	name, h := ns+"l", owner()
	firstToken, err := acquire(ctx, b, name, h, longTTL)
	if err != nil {
		return err
	}
	type served struct {
		who      int
		token    fence.Token
		at       time.Time // when Acquire returned
		released time.Time // when its Release began
	}
	var (
		mu  sync.Mutex
		log []served
	)
	waiters := make([]*waiter, queueWaiters)
	for i := range waiters {
		w, err := startWaiter(ctx, b, name, queuePlaceTTL, func(l *lock.Lease) {
			mu.Lock()
			log = append(log, served{who: i, token: l.Token(), at: time.Now()})
			log[len(log)-1].released = time.Now()
			mu.Unlock()
			_ = l.Release(context.WithoutCancel(ctx))
		})
		if err != nil {
			return err
		}
		defer w.cancel()
		waiters[i] = w
	}
	released := time.Now()
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release by the first holder: %w", err)
	}
	for i, w := range waiters {
		if _, err := w.served(ctx, fmt.Sprintf("waiter %d of %d", i+1, len(waiters))); err != nil {
			return err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	prev, prevRelease := firstToken, released
	for i, s := range log {
		if s.who != i {
			order := make([]int, len(log))
			for j, s := range log {
				order[j] = s.who + 1
			}
			return fmt.Errorf("waiters queued in the order 1..%d were served in the order %v", len(log), order)
		}
		if s.token <= prev {
			return fmt.Errorf("waiter %d got token %d, not above the previous holder's %d", i+1, s.token, prev)
		}
		if gap := s.at.Sub(prevRelease); gap >= slowRenewal/2 {
			return fmt.Errorf("waiter %d got the lock %v after the previous release: not woken by it", i+1, gap)
		}
		prev, prevRelease = s.token, s.released
	}
	return expectFree(ctx, b, name)
}

func checkQueueWakeAtExpiry(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	firstToken, granted, err := acquireTimed(ctx, b, name, owner(), expiringTTL)
	if err != nil {
		return err
	}
	w, err := startWaiter(ctx, b, name, queuePlaceTTL, nil)
	if err != nil {
		return err
	}
	defer w.cancel()
	l, err := w.served(ctx, "the waiter behind a holder whose lease expires")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	if time.Now().Before(granted.call.Add(expiringTTL)) {
		return fmt.Errorf("the waiter got the lock before the holder's %v lease could have expired", expiringTTL)
	}
	if l.Token() <= firstToken {
		return fmt.Errorf("the waiter's token %d is not above the expired holder's %d", l.Token(), firstToken)
	}
	return nil
}

func checkQueueSkipsDeadWaiter(ctx context.Context, b driver.Backend, ns string) error {
	name, h, dead := ns+"l", owner(), owner()
	// A waiter that queues once and never renews: a crashed process.
	if err := holdAndQueue(ctx, b, name, h, dead, deadPlaceTTL); err != nil {
		return err
	}
	w, err := startWaiter(ctx, b, name, livePlaceTTL, nil)
	if err != nil {
		return err
	}
	defer w.cancel()
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	l, err := w.served(ctx, "the waiter behind a dead waiter")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return expectHolder(ctx, b, name, l.Owner(), l.Token())
}

func checkQueueSkipsCancelledWaiter(ctx context.Context, b driver.Backend, ns string) error {
	name, h := ns+"l", owner()
	if _, err := acquire(ctx, b, name, h, longTTL); err != nil {
		return err
	}
	gone, err := startWaiter(ctx, b, name, queuePlaceTTL, nil)
	if err != nil {
		return err
	}
	next, err := startWaiter(ctx, b, name, queuePlaceTTL, nil)
	if err != nil {
		return err
	}
	defer next.cancel()
	gone.cancel()
	if err := waitChan(ctx, gone.done, "the cancelled Acquire returning"); err != nil {
		return err
	}
	if err := expectIs("Acquire whose context was cancelled", gone.err, lock.ErrNotAcquired); err != nil {
		return err
	}
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	l, err := next.served(ctx, "the waiter behind a cancelled one")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return nil
}

// checkQueueIdempotent: a retried request keeps the owner's place, and a
// Leave by an owner without a place changes nothing; the first in line is
// told the holder's TTL, the second 0; the holder keeps its token.
func checkQueueIdempotent(ctx context.Context, b driver.Backend, ns string) error {
	name, h, a, c := ns+"l", owner(), owner(), owner()
	hTok, err := acquire(ctx, b, name, h, longTTL)
	if err != nil {
		return err
	}
	queue := func(who string) error {
		_, err := enqueue(ctx, b, name, who, longTTL, queuePlaceTTL)
		return err
	}
	// a, then a again (a retry), then c, then a once more: a stays first.
	for i, who := range []string{a, a, c, a} {
		err := queue(who)
		if err := expectIs(fmt.Sprintf("Acquire with a place %d of a held lock", i+1), err, driver.ErrHeld); err != nil {
			return err
		}
		var he *driver.HeldError
		if errors.As(err, &he) {
			switch {
			case who == a && he.TTL <= 0:
				return fmt.Errorf("Acquire with a place by the first in line: HeldError.TTL %v; want the holder's remaining TTL", he.TTL)
			case who == a && he.TTL > longTTL+tolerance:
				return fmt.Errorf("Acquire with a place by the first in line: HeldError.TTL %v, above the holder's %v", he.TTL, longTTL)
			case who == c && he.TTL != 0:
				return fmt.Errorf("Acquire with a place by the second in line: HeldError.TTL %v; want 0", he.TTL)
			}
		}
	}
	// Leave by owners without a place (a stranger, the holder) removes
	// nobody's place and frees nothing: a is still first in line.
	if err := first(b.Leave(ctx, lockClaim(name, owner())), b.Leave(ctx, lockClaim(name, h))); err != nil {
		return fmt.Errorf("Leave by an owner without a place: %w", err)
	}
	if err := expectHolder(ctx, b, name, h, hTok); err != nil {
		return fmt.Errorf("after Leave by the holder (Leave must not free the lock): %w", err)
	}
	if info, err := inspect(ctx, b, name); err != nil || info.Waiting != 2 {
		return first(err, fmt.Errorf("after Leave by a stranger and by the holder, neither in line: %d waiting; want 2: Leave must remove nobody else's place", info.Waiting))
	}
	if err, he := queue(a), (*driver.HeldError)(nil); !errors.As(err, &he) || he.TTL <= 0 {
		return fmt.Errorf("the first in line asking again after others' Leave: %v; want a *driver.HeldError with the holder's TTL, for it is still first", err)
	}
	// The holder re-acquiring through the queue keeps its token.
	if tok, err := enqueue(ctx, b, name, h, longTTL, queuePlaceTTL); err != nil || tok != hTok {
		return fmt.Errorf("Acquire with a place by the holder = %d, %v; want its own token %d", tok, err, hTok)
	}
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := expectIs("Acquire with a place by the second in line of a free lock", queue(c), driver.ErrHeld); err != nil {
		return err
	}
	aTok, err := enqueue(ctx, b, name, a, longTTL, queuePlaceTTL)
	if err != nil {
		return fmt.Errorf("Acquire with a place by the first in line of a free lock: %w", err)
	}
	if aTok <= hTok {
		return fmt.Errorf("token %d is not above the previous holder's %d", aTok, hTok)
	}
	if err := expectHolder(ctx, b, name, a, aTok); err != nil {
		return err
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	cTok, err := enqueue(ctx, b, name, c, longTTL, queuePlaceTTL)
	if err != nil {
		return fmt.Errorf("Acquire with a place by the only waiter left: %w", err)
	}
	if cTok <= aTok {
		return fmt.Errorf("token %d is not above the previous holder's %d", cTok, aTok)
	}
	if err := release(ctx, b, name, c); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	// Leaving a queue one is not in is no error.
	if err := b.Leave(ctx, lockClaim(name, a)); err != nil {
		return fmt.Errorf("Leave by an owner without a place: %w", err)
	}
	return expectFree(ctx, b, name)
}

func checkAwaitContext(ctx context.Context, b driver.Backend, ns string) error {
	name, h, a := ns+"l", owner(), owner()
	defer release(context.WithoutCancel(ctx), b, name, h)
	if err := holdAndQueue(ctx, b, name, h, a, queuePlaceTTL); err != nil {
		return err
	}
	defer b.Leave(context.WithoutCancel(ctx), lockClaim(name, a))
	cctx, cancel := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() { returned <- b.Await(cctx, lockClaim(name, a), queuePlaceTTL) }()
	cancel()
	select {
	case err := <-returned:
		return expectIs("Await whose context was cancelled", err, context.Canceled)
	case <-time.After(waitFor):
		return fmt.Errorf("Await did not return within %v of its context's cancellation", waitFor)
	}
}

func checkQueueLeaveWakesNext(ctx context.Context, b driver.Backend, ns string) error {
	name, h, first := ns+"l", owner(), owner()
	if err := holdAndQueue(ctx, b, name, h, first, queuePlaceTTL); err != nil {
		return err
	}
	next, err := startWaiter(ctx, b, name, queuePlaceTTL, nil)
	if err != nil {
		return err
	}
	defer next.cancel()
	// The release wakes the first in line, which leaves instead of taking
	// the lock: its leaving must wake the next one.
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	if err := b.Leave(ctx, lockClaim(name, first)); err != nil {
		return fmt.Errorf("Leave by the first in line: %w", err)
	}
	l, err := next.served(ctx, "the waiter behind one that left while the lock was free")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return nil
}

func checkQueueKeepsEarlyWakeUp(ctx context.Context, b driver.Backend, ns string) error {
	name, h, a := ns+"l", owner(), owner()
	if err := holdAndQueue(ctx, b, name, h, a, queuePlaceTTL); err != nil {
		return err
	}
	defer b.Leave(context.WithoutCancel(ctx), lockClaim(name, a))
	// The wake-up is sent before the waiter starts to wait.
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	returned := make(chan error, 1)
	go func() { returned <- b.Await(ctx, lockClaim(name, a), slowRenewal) }()
	select {
	case err := <-returned:
		if err != nil {
			return fmt.Errorf("Await after a wake-up: %w", err)
		}
	case <-time.After(waitFor):
		return fmt.Errorf("Await called after the release that woke it did not return within %v: the wake-up was lost", waitFor)
	}
	tok, err := enqueue(ctx, b, name, a, longTTL, queuePlaceTTL)
	if err != nil {
		return fmt.Errorf("Acquire with a place by the woken first in line: %w", err)
	}
	return first(expectHolder(ctx, b, name, a, tok), release(ctx, b, name, a))
}

// holdAndQueue takes name for holder and puts waiter in line behind it
// with a place of place: how most queue checks begin.
func holdAndQueue(ctx context.Context, b driver.Backend, name, holder, waiter string, place time.Duration) error {
	if _, err := acquire(ctx, b, name, holder, longTTL); err != nil {
		return err
	}
	_, err := enqueue(ctx, b, name, waiter, longTTL, place)
	return expectIs("Acquire with a place of a held lock", err, driver.ErrHeld)
}

// checkQueueInspectWaiting: Inspect of a lock reports how many live places
// are in its line: one per owner however often it asks, none for one that
// left or whose place ran out (and not before it ran out).
func checkQueueInspectWaiting(ctx context.Context, b driver.Backend, ns string) error {
	name, h, a, c := ns+"l", owner(), owner(), owner()
	tok, err := acquire(ctx, b, name, h, longTTL)
	if err != nil {
		return err
	}
	expectWaiting := func(n int, what string) error {
		info, err := inspect(ctx, b, name)
		if err != nil {
			return err
		}
		if !info.Held || info.Owner != h || info.Token != tok || info.Waiting != n {
			return fmt.Errorf("Inspect(%q) %s = %+v; want held by %q with token %d, %d waiting", name, what, info, h, tok, n)
		}
		return nil
	}
	if err := expectWaiting(0, "before anyone waits"); err != nil {
		return err
	}
	var placed window
	for i, who := range []string{a, c, a, c} {
		place := queuePlaceTTL
		if who == c {
			place = deadPlaceTTL
		}
		w := timed(func() { _, err = enqueue(ctx, b, name, who, longTTL, place) })
		if err := expectIs(fmt.Sprintf("Acquire with a place %d of a held lock", i+1), err, driver.ErrHeld); err != nil {
			return err
		}
		placed = w
	}
	if err := expectWaiting(2, "with two waiters, each of which asked twice"); err != nil {
		return err
	}
	if err := b.Leave(ctx, lockClaim(name, a)); err != nil {
		return fmt.Errorf("Leave: %w", err)
	}
	// c stops renewing: its place runs out deadPlaceTTL after its last call.
	deadline := time.Now().Add(waitFor + deadPlaceTTL)
	for {
		info, err := inspect(ctx, b, name)
		ret := time.Now()
		if err != nil {
			return err
		}
		if info.Waiting == 0 {
			if ret.Before(placed.call.Add(deadPlaceTTL - tolerance)) {
				return fmt.Errorf("a place kept for %v was dropped after at most %v: a place must last its whole TTL", deadPlaceTTL, ret.Sub(placed.call))
			}
			break
		}
		if info.Waiting != 1 {
			return fmt.Errorf("Inspect(%q) after one waiter left = %+v; want 1 waiting until the other's place runs out", name, info)
		}
		if ret.After(deadline) {
			return fmt.Errorf("a place kept for %v was still counted %v later", deadPlaceTTL, ret.Sub(placed.call))
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	if err := expectWaiting(0, "after the last place ran out"); err != nil {
		return err
	}
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	return expectFree(ctx, b, name)
}

// Durations of the checks that a wake-up comes well before the waiter's
// renewal (QueueWakesBeforeRenewal, Permits/PermitWakesBeforeRenewal). The
// waiters' places live promptPlaceTTL, so they renew them, and a waiter
// that nothing woke asks again, every 3 s (and the holders' leases outlive
// that); a waiter must be served within promptWake of the call that lets
// it in. The other queue checks' gap (served within 5 s, renewal after
// 10 s) is wider, so they let through a backend that serves its waiters
// only at a renewal some seconds away; this one does not, and a loaded
// machine still has two seconds of margin.
const (
	promptPlaceTTL = 9 * time.Second
	promptWake     = time.Second
	promptSettle   = 300 * time.Millisecond // a waiter already waiting in Await
)

// promptly starts a waiter through a Client whose places live
// promptPlaceTTL, waits settle (0: the release races the waiter's first
// Await), runs letIn (a release, or a Leave, that lets the waiter in), and
// fails unless the waiter is served within promptWake of letIn's start.
// It returns the waiter's lease.
func promptly(ctx context.Context, b driver.Backend, what string, settle time.Duration, acquire func(context.Context, *lock.Client) (*lock.Lease, error), letIn func() error) (*lock.Lease, error) {
	var servedAt time.Time
	w, err := startAcquirer(ctx, b, promptPlaceTTL, acquire, func(*lock.Lease) { servedAt = time.Now() })
	if err != nil {
		return nil, err
	}
	defer w.cancel()
	queuedAt := time.Now()
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	at := time.Now()
	if err := letIn(); err != nil {
		return nil, err
	}
	l, err := w.served(ctx, what)
	if err != nil {
		return nil, err
	}
	if took := servedAt.Sub(at); took >= promptWake {
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%s was served %v after the call that let it in (%v after it queued; it renews its place every %v): want within %v, well before its renewal: not woken by that call",
			what, took.Round(time.Millisecond), servedAt.Sub(queuedAt).Round(time.Millisecond), promptPlaceTTL/3, promptWake)
	}
	return l, nil
}

// checkQueueWakesBeforeRenewal: a release wakes the first in line at once,
// whether it comes while the waiter waits or as it starts to wait, and so
// does a Leave by the first in line for the next: each is served within
// promptWake, not at its renewal seconds later.
func checkQueueWakesBeforeRenewal(ctx context.Context, b driver.Backend, ns string) error {
	acquireLock := func(name string) func(context.Context, *lock.Client) (*lock.Lease, error) {
		return func(ctx context.Context, c *lock.Client) (*lock.Lease, error) { return c.Acquire(ctx, name, longTTL) }
	}
	for i, settle := range []time.Duration{promptSettle, 0} {
		name, h := fmt.Sprintf("%sl%d", ns, i), owner()
		if _, err := acquire(ctx, b, name, h, longTTL); err != nil {
			return err
		}
		what := fmt.Sprintf("the waiter behind a holder that releases %v after it queued", settle)
		l, err := promptly(ctx, b, what, settle, acquireLock(name), func() error {
			if err := release(ctx, b, name, h); err != nil {
				return fmt.Errorf("Release by the holder: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	// The first in line is woken by the release and leaves instead of
	// taking the lock: its Leave must wake the next.
	name, h, first := ns+"leave", owner(), owner()
	if err := holdAndQueue(ctx, b, name, h, first, promptPlaceTTL); err != nil {
		return err
	}
	defer b.Leave(context.WithoutCancel(ctx), lockClaim(name, first))
	if err := release(ctx, b, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	l, err := promptly(ctx, b, "the waiter behind a first in line that leaves the free lock", promptSettle, acquireLock(name), func() error {
		if err := b.Leave(ctx, lockClaim(name, first)); err != nil {
			return fmt.Errorf("Leave by the first in line: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return l.Release(ctx)
}
