package lock_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// faultyBackend wraps a backend and injects failures into chosen calls.
type faultyBackend struct {
	driver.Backend
	// acquireErr, when set, is returned after the wrapped Acquire ran: the
	// lock was taken but the caller hears an error (a lost reply).
	acquireErr func(attempt int) error
	// acquireFail, when set, is returned instead of calling the wrapped
	// Acquire: the request failed and took nothing.
	acquireFail func(attempt int) error
	// acquireDelay runs after the wrapped Acquire, before the reply.
	acquireDelay func()
	extendErr    func() error
	releaseErr   func() error
	attempts     atomic.Int64
	extends      atomic.Int64
	releases     atomic.Int64
}

func (f *faultyBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	n := int(f.attempts.Add(1))
	if f.acquireFail != nil {
		if err := f.acquireFail(n); err != nil {
			return driver.Grant{}, err
		}
	}
	g, err := f.Backend.Acquire(ctx, req)
	if f.acquireDelay != nil {
		f.acquireDelay()
	}
	if err == nil && f.acquireErr != nil {
		if ferr := f.acquireErr(n); ferr != nil {
			return driver.Grant{}, ferr
		}
	}
	return g, err
}

func (f *faultyBackend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	f.extends.Add(1)
	if f.extendErr != nil {
		if err := f.extendErr(); err != nil {
			return err
		}
	}
	return f.Backend.Extend(ctx, c, ttl)
}

func (f *faultyBackend) Release(ctx context.Context, c driver.Claim) error {
	f.releases.Add(1)
	if f.releaseErr != nil {
		if err := f.releaseErr(); err != nil {
			return err
		}
	}
	return f.Backend.Release(ctx, c)
}

// errNetwork stands for a lost reply: a transient failure, so it is retried.
var errNetwork = driver.Transient(errors.New("network: connection reset"))

// errPermanent stands for a failure no retry cures (a missing table).
var errPermanent = errors.New("ERR no such table")

func TestAcquireRetriesAnAmbiguousAttemptWithTheSameToken(t *testing.T) {
	mem := memory.NewBackend()
	f := &faultyBackend{Backend: mem, acquireErr: func(n int) error {
		if n == 1 {
			return errNetwork // the lock was taken; the reply was lost
		}
		return nil
	}}
	c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, Queue: polling})
	l, err := c.Acquire(context.Background(), "job", time.Second)
	if err != nil {
		t.Fatalf("Acquire after a lost reply: %v", err)
	}
	defer l.Release(context.Background())
	if l.Token() != 1 {
		t.Fatalf("token %d; the retry must get the token of the lost attempt, 1", l.Token())
	}
	if n := f.attempts.Load(); n != 2 {
		t.Fatalf("%d attempts; want 2", n)
	}
}

func TestGivingUpAfterAnAmbiguousAttemptReleasesTheLock(t *testing.T) {
	mem := memory.NewBackend()
	f := &faultyBackend{Backend: mem, acquireErr: func(int) error { return errNetwork }}
	c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, MaxAttempts: 2, Queue: polling})
	_, err := c.Acquire(context.Background(), "job", time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, errNetwork) {
		t.Fatalf("error %v; want ErrNotAcquired joined with the network error", err)
	}
	info, err := inspectLock(context.Background(), mem, "job")
	if err != nil {
		t.Fatal(err)
	}
	if info.Held {
		t.Fatalf("the lock taken by the ambiguous attempt is still held by %q; giving up must release it", info.Owner)
	}
}

func TestReplyAfterTheLocalDeadlineIsNotALease(t *testing.T) {
	mem := memory.NewBackend()
	f := &faultyBackend{Backend: mem, acquireDelay: func() { time.Sleep(20 * time.Millisecond) }}
	c := lock.New(f, nil)
	_, err := c.TryAcquire(context.Background(), "job", 10*time.Millisecond)
	if !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("error %v; want ErrNotAcquired and ErrLost for a reply that came after the deadline", err)
	}
}

func TestInvalidInputIsNotRetried(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	c := lock.New(f, nil)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"", time.Second}, {"job", 0}, {"job", time.Microsecond}, {"a\x00b", time.Second}} {
		if _, err := c.Acquire(context.Background(), tc.name, tc.ttl); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Acquire(%q, %v): %v; want ErrInvalid", tc.name, tc.ttl, err)
		}
	}
	if n := f.attempts.Load(); n != 0 {
		t.Fatalf("%d requests sent for invalid input; want 0", n)
	}
	var nilClient *lock.Client
	if _, err := nilClient.TryAcquire(context.Background(), "job", time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("nil client: %v; want ErrInvalid", err)
	}
	if _, err := lock.New(nil, nil).TryAcquire(context.Background(), "job", time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("nil backend: %v; want ErrInvalid", err)
	}
	if err := lock.New(f, nil).Do(context.Background(), "job", time.Second, nil); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Do with nil fn: %v; want ErrInvalid", err)
	}
}

func TestKeepAliveSurvivesTransientErrors(t *testing.T) {
	mem := memory.NewBackend()
	var failures atomic.Int64
	f := &faultyBackend{Backend: mem, extendErr: func() error {
		// The first two renewals fail, as on a flaky network.
		if failures.Add(1) <= 2 {
			return errNetwork
		}
		return nil
	}}
	extended := make(chan struct{}, 16)
	c := lock.New(f, &lock.Options{KeepAlive: true, Observer: &lock.Observer{Extended: func(lock.Event) {
		select {
		case extended <- struct{}{}:
		default:
		}
	}}})
	l, err := c.TryAcquire(context.Background(), "job", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	deadline := time.After(5 * time.Second)
	for i := 0; i < 3; i++ {
		select {
		case <-extended:
		case <-l.Done():
			t.Fatalf("lease lost: %v", l.Err())
		case <-deadline:
			t.Fatal("no renewal")
		}
	}
	if n := failures.Load(); n < 5 {
		t.Fatalf("%d renewal attempts; want the 2 failures then 3 successes", n)
	}
}

func TestKeepAliveFailingUntilTheDeadlineLosesTheLease(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), extendErr: func() error { return errNetwork }}
	var lost atomic.Int64
	c := lock.New(f, &lock.Options{KeepAlive: true, Observer: &lock.Observer{Lost: func(lock.Event) { lost.Add(1) }}})
	l, err := c.TryAcquire(context.Background(), "job", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not reported lost after renewals failed past its deadline")
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", l.Err())
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("Lost observed %d times; want 1", n)
	}
	f.Backend.(*memory.Backend).Expire("job") // the server-side TTL runs out too
	if err := l.Release(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of a lease that expired on the backend: %v; want ErrNotHeld", err)
	}
}

func TestReleaseAfterANetworkErrorCanBeRetried(t *testing.T) {
	mem := memory.NewBackend()
	var fail atomic.Bool
	fail.Store(true)
	f := &faultyBackend{Backend: mem, releaseErr: func() error {
		if fail.Load() {
			return errNetwork
		}
		return nil
	}}
	c := lock.New(f, nil)
	l, err := c.TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, errNetwork) {
		t.Fatalf("Release: %v; want the network error", err)
	}
	if l.Err() != nil {
		t.Fatalf("lease ended by a failed release: %v", l.Err())
	}
	fail.Store(false)
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("retried Release: %v", err)
	}
	if info, _ := inspectLock(context.Background(), mem, "job"); info.Held {
		t.Fatalf("lock still held after the retried release")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("second Release of a released lease: %v; want nil", err)
	}
	if !errors.Is(l.Err(), lock.ErrReleased) {
		t.Fatalf("Err = %v; want ErrReleased", l.Err())
	}
}

func TestRetriedReleaseAfterALostReplyCountsAsReleased(t *testing.T) {
	mem := memory.NewBackend()
	var lostReply atomic.Bool
	lostReply.Store(true)
	c := lock.New(&lostReplyRelease{faultyBackend: &faultyBackend{Backend: mem}, lost: &lostReply}, nil)
	l, err := c.TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, errNetwork) {
		t.Fatalf("Release: %v; want the network error", err)
	}
	lostReply.Store(false)
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("retried Release after a lost reply: %v; want nil", err)
	}
	if !errors.Is(l.Err(), lock.ErrReleased) {
		t.Fatalf("Err = %v; want ErrReleased", l.Err())
	}
}

// lostReplyRelease releases for real, then reports a network error while
// lost is set: the release landed but its reply did not. With once, only the
// first reply is lost.
type lostReplyRelease struct {
	*faultyBackend
	lost *atomic.Bool
	once bool
}

func (b *lostReplyRelease) Release(ctx context.Context, c driver.Claim) error {
	err := b.faultyBackend.Release(ctx, c)
	if err == nil && b.lost.Load() {
		if b.once {
			b.lost.Store(false)
		}
		return errNetwork
	}
	return err
}

func TestLeaseTTLOfALostLease(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	l, err := c.TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mem.Expire("job")
	if _, err := l.TTL(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("TTL after the backend dropped the lease: %v; want ErrNotHeld", err)
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Fatalf("Err = %v; want ErrLost", l.Err())
	}
	if err := l.Extend(context.Background(), time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of a lost lease: %v; want ErrNotHeld", err)
	}
}

func TestExtendRefusedByBackendLosesLease(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	l, err := c.TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mem.Expire("job")
	if err := l.Extend(context.Background(), time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend: %v; want ErrNotHeld", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after the backend refused a renewal")
	}
}

func TestDoReportsLossAndFnError(t *testing.T) {
	mem := memory.NewBackend()
	c := lock.New(mem, nil)
	boom := errors.New("boom")
	err := c.Do(context.Background(), "job", time.Minute, func(ctx context.Context, l *lock.Lease) error {
		mem.Expire("job")
		if err := l.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Extend: %v", err)
		}
		<-ctx.Done()
		return boom
	})
	if !errors.Is(err, boom) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do: %v; want fn's error joined with ErrLost", err)
	}
}

func TestDoReturnsAcquireError(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := takeLock(context.Background(), mem, "job", "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := lock.New(mem, &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond})
	ran := false
	err := c.Do(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error { ran = true; return nil })
	if !errors.Is(err, lock.ErrNotAcquired) || ran {
		t.Fatalf("Do on a held lock: %v, fn ran %v; want ErrNotAcquired and fn not run", err, ran)
	}
}

func TestDoReportsReleaseFailure(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), releaseErr: func() error { return errNetwork }}
	err := lock.New(f, nil).Do(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error { return nil })
	if !errors.Is(err, errNetwork) {
		t.Fatalf("Do: %v; want the release error", err)
	}
}

func TestBackoffWaitsNoLongerThanTheHoldersTTL(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := takeLock(context.Background(), mem, "job", "holder", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Backoff ceilings of a minute would park the waiter for far longer than
	// the holder's 50ms; the held TTL caps the wait instead.
	c := lock.New(mem, &lock.Options{MinBackoff: time.Minute, MaxBackoff: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "job", time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	_ = l.Release(ctx)
}

func TestWriterReportsStaleRefusals(t *testing.T) {
	mem := memory.NewBackend()
	store := memory.NewStore()
	events := &recorder{}
	c := lock.New(mem, &lock.Options{Observer: events.observer()})
	ctx := context.Background()
	a, err := c.TryAcquire(ctx, "job", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-a.Done() // lost at its local deadline
	mem.Expire("job")
	b, err := c.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wb := b.Fenced(store)
	if err := wb.Advance(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := wb.Put(ctx, "k", []byte("b")); err != nil {
		t.Fatal(err)
	}
	wa := a.Fenced(store)
	if err := wa.Put(ctx, "k", []byte("a")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late Put: %v; want ErrStale", err)
	}
	if err := wa.Delete(ctx, "k"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("late Delete: %v; want ErrStale", err)
	}
	rec, err := wa.Get(ctx, "k")
	if err != nil || string(rec.Value) != "b" || rec.Fence != b.Token() {
		t.Fatalf("Get = %q fence %d, %v; want \"b\" fence %d", rec.Value, rec.Fence, err, b.Token())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stale := 0
	for _, e := range events.of("stale") {
		stale++
		if e.Key != "k" || e.Token != a.Token() || !errors.Is(e.Err, fence.ErrStale) {
			t.Errorf("stale event %+v", e)
		}
	}
	kinds := events.kinds()
	want := []string{"acquired", "lost", "acquired", "stale", "stale", "released"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events %v; want %v", kinds, want)
	}
	if stale != 2 {
		t.Fatalf("%d stale events; want 2", stale)
	}
}

func TestWriterOverNilStore(t *testing.T) {
	c := lock.New(memory.NewBackend(), nil)
	l, err := c.TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w := l.Fenced(nil)
	ctx := context.Background()
	for name, err := range map[string]error{
		"Put": w.Put(ctx, "k", nil), "Delete": w.Delete(ctx, "k"), "Advance": w.Advance(ctx, "k"),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s on a nil store: %v; want ErrInvalid", name, err)
		}
	}
	if _, err := w.Get(ctx, "k"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Get on a nil store: %v; want ErrInvalid", err)
	}
}

func TestNewOwnerIsRandom(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		o, err := lock.NewOwner()
		if err != nil {
			t.Fatal(err)
		}
		if len(o) != 32 || seen[o] {
			t.Fatalf("owner %q: want 32 hex digits, never repeated", o)
		}
		seen[o] = true
	}
}

func TestGivingUpReleasesOnlyAfterTheAmbiguousAttemptReturned(t *testing.T) {
	mem := memory.NewBackend()
	s := &slowAcquire{Backend: mem}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := lock.New(s, nil).Acquire(ctx, "job", time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v; want ErrNotAcquired and DeadlineExceeded", err)
	}
	if s.releases.Load() == 0 {
		t.Fatal("no release after giving up on an ambiguous attempt")
	}
	if s.overlapped.Load() {
		t.Fatal("the abandoning release was sent while the attempt was still in flight: it could land first and leave an orphan")
	}
	expectFree(t, mem, "job")
}
