package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
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

// QueueChecks returns the checks of the optional capability
// lock.QueueBackend. Each fails at once on a backend without it.
func QueueChecks() []Check {
	return []Check{
		{"QueueServesInArrivalOrder", checkQueueOrder},
		{"QueueWakesAtHolderExpiry", checkQueueWakeAtExpiry},
		{"QueueSkipsDeadWaiter", checkQueueSkipsDeadWaiter},
		{"QueueSkipsCancelledWaiter", checkQueueSkipsCancelledWaiter},
		{"QueueLeaveWakesNext", checkQueueLeaveWakesNext},
		{"QueueKeepsEarlyWakeUp", checkQueueKeepsEarlyWakeUp},
		{"QueuePlaceIsIdempotent", checkQueueIdempotent},
		{"QueueAwaitTurnHonoursContext", checkAwaitTurnContext},
		{"QueueRefusesShortPlace", checkQueueShortPlace},
	}
}

// RunQueue runs QueueChecks as subtests of t. Run calls it when the backend
// that newBackend returns implements lock.QueueBackend, so a backend that
// opts in is checked without a line of its own.
func RunQueue(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	runChecks(t, QueueChecks(), newBackend)
}

func asQueue(b lock.Backend) (lock.QueueBackend, error) {
	q, ok := b.(lock.QueueBackend)
	if !ok {
		return nil, fmt.Errorf("%T does not implement lock.QueueBackend", b)
	}
	return q, nil
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
func startWaiter(ctx context.Context, b lock.Backend, name string, placeTTL time.Duration, then func(*lock.Lease)) (*waiter, error) {
	return startAcquirer(ctx, b, placeTTL, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.Acquire(ctx, name, longTTL)
	}, then)
}

// startAcquirer is startWaiter for any blocking acquire through a Client
// on b (a semaphore's or a read-write lock's, say).
func startAcquirer(ctx context.Context, b lock.Backend, placeTTL time.Duration, acquire func(ctx context.Context, c *lock.Client) (*lock.Lease, error), then func(*lock.Lease)) (*waiter, error) {
	w := &waiter{queued: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	c := lock.New(b, &lock.Options{
		Queue: lock.QueueOptions{PlaceTTL: placeTTL},
		Observer: func(e lock.Event) {
			if e.Kind == lock.EventRetrying {
				once.Do(func() { close(w.queued) })
			}
		},
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

func checkQueueOrder(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asQueue(b); err != nil {
		return err
	}
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
	if err := b.Release(ctx, name, h); err != nil {
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

func checkQueueWakeAtExpiry(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asQueue(b); err != nil {
		return err
	}
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

func checkQueueSkipsDeadWaiter(ctx context.Context, b lock.Backend, ns string) error {
	q, err := asQueue(b)
	if err != nil {
		return err
	}
	name, h, dead := ns+"l", owner(), owner()
	// A waiter that queues once and never renews: a crashed process.
	if err := holdAndQueue(ctx, b, q, name, h, dead, deadPlaceTTL); err != nil {
		return err
	}
	w, err := startWaiter(ctx, b, name, livePlaceTTL, nil)
	if err != nil {
		return err
	}
	defer w.cancel()
	if err := b.Release(ctx, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	l, err := w.served(ctx, "the waiter behind a dead waiter")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return expectHolder(ctx, b, name, l.Owner(), l.Token())
}

func checkQueueSkipsCancelledWaiter(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asQueue(b); err != nil {
		return err
	}
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
	if err := b.Release(ctx, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	l, err := next.served(ctx, "the waiter behind a cancelled one")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return nil
}

func checkQueueIdempotent(ctx context.Context, b lock.Backend, ns string) error {
	q, err := asQueue(b)
	if err != nil {
		return err
	}
	name, h, a, c := ns+"l", owner(), owner(), owner()
	hTok, err := acquire(ctx, b, name, h, longTTL)
	if err != nil {
		return err
	}
	enqueue := func(who string) error {
		_, err := q.AcquireOrEnqueue(ctx, name, who, longTTL, queuePlaceTTL)
		return err
	}
	// a, then a again (a retry), then c, then a once more: a stays first.
	for i, who := range []string{a, a, c, a} {
		err := enqueue(who)
		if err := expectIs(fmt.Sprintf("AcquireOrEnqueue %d of a held lock", i+1), err, lock.ErrHeld); err != nil {
			return err
		}
		var he *lock.HeldError
		if errors.As(err, &he) {
			switch {
			case who == a && he.TTL <= 0:
				return fmt.Errorf("AcquireOrEnqueue by the first in line: HeldError.TTL %v; want the holder's remaining TTL", he.TTL)
			case who == a && he.TTL > longTTL+tolerance:
				return fmt.Errorf("AcquireOrEnqueue by the first in line: HeldError.TTL %v, above the holder's %v", he.TTL, longTTL)
			case who == c && he.TTL != 0:
				return fmt.Errorf("AcquireOrEnqueue by the second in line: HeldError.TTL %v; want 0", he.TTL)
			}
		}
	}
	// The holder re-acquiring through the queue keeps its token.
	if tok, err := q.AcquireOrEnqueue(ctx, name, h, longTTL, queuePlaceTTL); err != nil || tok != hTok {
		return fmt.Errorf("AcquireOrEnqueue by the holder = %d, %v; want its own token %d", tok, err, hTok)
	}
	if err := b.Release(ctx, name, h); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	if err := expectIs("AcquireOrEnqueue by the second in line of a free lock", enqueue(c), lock.ErrHeld); err != nil {
		return err
	}
	aTok, err := q.AcquireOrEnqueue(ctx, name, a, longTTL, queuePlaceTTL)
	if err != nil {
		return fmt.Errorf("AcquireOrEnqueue by the first in line of a free lock: %w", err)
	}
	if aTok <= hTok {
		return fmt.Errorf("token %d is not above the previous holder's %d", aTok, hTok)
	}
	if err := expectHolder(ctx, b, name, a, aTok); err != nil {
		return err
	}
	if err := b.Release(ctx, name, a); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	cTok, err := q.AcquireOrEnqueue(ctx, name, c, longTTL, queuePlaceTTL)
	if err != nil {
		return fmt.Errorf("AcquireOrEnqueue by the only waiter left: %w", err)
	}
	if cTok <= aTok {
		return fmt.Errorf("token %d is not above the previous holder's %d", cTok, aTok)
	}
	if err := b.Release(ctx, name, c); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	// Leaving a queue one is not in is no error.
	if err := q.LeaveQueue(ctx, name, a); err != nil {
		return fmt.Errorf("LeaveQueue by an owner without a place: %w", err)
	}
	return expectFree(ctx, b, name)
}

func checkAwaitTurnContext(ctx context.Context, b lock.Backend, ns string) error {
	q, err := asQueue(b)
	if err != nil {
		return err
	}
	name, h, a := ns+"l", owner(), owner()
	defer b.Release(context.WithoutCancel(ctx), name, h)
	if err := holdAndQueue(ctx, b, q, name, h, a, queuePlaceTTL); err != nil {
		return err
	}
	defer q.LeaveQueue(context.WithoutCancel(ctx), name, a)
	cctx, cancel := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() { returned <- q.AwaitTurn(cctx, name, a, queuePlaceTTL) }()
	cancel()
	select {
	case err := <-returned:
		return expectIs("AwaitTurn whose context was cancelled", err, context.Canceled)
	case <-time.After(waitFor):
		return fmt.Errorf("AwaitTurn did not return within %v of its context's cancellation", waitFor)
	}
}

func checkQueueShortPlace(ctx context.Context, b lock.Backend, ns string) error {
	q, err := asQueue(b)
	if err != nil {
		return err
	}
	name := ns + "l"
	_, err = q.AcquireOrEnqueue(ctx, name, owner(), longTTL, lock.MinPlaceTTL-time.Millisecond)
	if err := expectIs("AcquireOrEnqueue with a place TTL below MinPlaceTTL", err, lock.ErrInvalid); err != nil {
		return err
	}
	return expectFree(ctx, b, name)
}

func checkQueueLeaveWakesNext(ctx context.Context, b lock.Backend, ns string) error {
	q, err := asQueue(b)
	if err != nil {
		return err
	}
	name, h, first := ns+"l", owner(), owner()
	if err := holdAndQueue(ctx, b, q, name, h, first, queuePlaceTTL); err != nil {
		return err
	}
	next, err := startWaiter(ctx, b, name, queuePlaceTTL, nil)
	if err != nil {
		return err
	}
	defer next.cancel()
	// The release wakes the first in line, which leaves instead of taking
	// the lock: its leaving must wake the next one.
	if err := b.Release(ctx, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	if err := q.LeaveQueue(ctx, name, first); err != nil {
		return fmt.Errorf("LeaveQueue by the first in line: %w", err)
	}
	l, err := next.served(ctx, "the waiter behind one that left while the lock was free")
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return nil
}

func checkQueueKeepsEarlyWakeUp(ctx context.Context, b lock.Backend, ns string) error {
	q, err := asQueue(b)
	if err != nil {
		return err
	}
	name, h, a := ns+"l", owner(), owner()
	if err := holdAndQueue(ctx, b, q, name, h, a, queuePlaceTTL); err != nil {
		return err
	}
	defer q.LeaveQueue(context.WithoutCancel(ctx), name, a)
	// The wake-up is sent before the waiter starts to wait.
	if err := b.Release(ctx, name, h); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	returned := make(chan error, 1)
	go func() { returned <- q.AwaitTurn(ctx, name, a, slowRenewal) }()
	select {
	case err := <-returned:
		if err != nil {
			return fmt.Errorf("AwaitTurn after a wake-up: %w", err)
		}
	case <-time.After(waitFor):
		return fmt.Errorf("AwaitTurn called after the release that woke it did not return within %v: the wake-up was lost", waitFor)
	}
	tok, err := q.AcquireOrEnqueue(ctx, name, a, longTTL, queuePlaceTTL)
	if err != nil {
		return fmt.Errorf("AcquireOrEnqueue by the woken first in line: %w", err)
	}
	return first(expectHolder(ctx, b, name, a, tok), b.Release(ctx, name, a))
}

// holdAndQueue takes name for holder and puts waiter in line behind it
// with a place of place: how most queue checks begin.
func holdAndQueue(ctx context.Context, b lock.Backend, q lock.QueueBackend, name, holder, waiter string, place time.Duration) error {
	if _, err := acquire(ctx, b, name, holder, longTTL); err != nil {
		return err
	}
	_, err := q.AcquireOrEnqueue(ctx, name, waiter, longTTL, place)
	return expectIs("AcquireOrEnqueue of a held lock", err, lock.ErrHeld)
}
