package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
)

// Deterministic tests of issue 21 points 5 and 6: a lease's local deadline
// never outlives the server's lease, and Err and Done see a passed deadline
// at once. They run in synctest bubbles, where the memory backend's expiry
// follows the fake clock (it reads time.Now).

// scriptedBackend applies every call at once; an Extend whose TTL is in
// hold then waits before it answers: until its context ends (unknown
// outcome) or, if release is set, until it closes.
type scriptedBackend struct {
	*memory.Backend
	hold    map[time.Duration]bool
	release chan struct{}
	extends atomic.Int64 // Extend requests received
}

func (b *scriptedBackend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	b.extends.Add(1)
	err := b.Backend.Extend(context.Background(), c, ttl)
	if !b.hold[ttl] {
		return err
	}
	if b.release == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	<-b.release
	return err
}

// serverEnd returns when the server's lease on the lock name ends.
func serverEnd(t *testing.T, b driver.Backend, name string) time.Time {
	t.Helper()
	info, err := b.Inspect(context.Background(), name, driver.Exclusive)
	if err != nil || len(info.Holders) == 0 {
		t.Fatalf("Inspect: %+v, %v; want a held lease", info, err)
	}
	return time.Now().Add(info.Holders[0].TTL)
}

func TestShorterExtendWithUnknownOutcomeMovesTheDeadlineIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBackend{Backend: memory.NewBackend(), hold: map[time.Duration]bool{100 * time.Millisecond: true}}
		l, err := New(b, nil).TryAcquire(context.Background(), "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		// The server applies the shorter TTL; its reply never comes.
		if err := l.Extend(ctx, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Extend: %v; want the context's deadline", err)
		}
		end := serverEnd(t, b, "job")
		if d := l.Deadline(); d.After(end) {
			t.Fatalf("local deadline %v after the server's lease ends: the lease would believe it holds a lock it lost", d.Sub(end))
		}
		time.Sleep(time.Until(end) + time.Millisecond)
		if !errors.Is(l.Err(), ErrLost) {
			t.Fatalf("after the server's lease ended: Err = %v; want ErrLost", l.Err())
		}
	})
}

func TestShorterExtendInFlightMovesTheDeadlineIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBackend{
			Backend: memory.NewBackend(),
			hold:    map[time.Duration]bool{100 * time.Millisecond: true},
			release: make(chan struct{}),
		}
		l, err := New(b, nil).TryAcquire(context.Background(), "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		extended := make(chan error, 1)
		go func() { extended <- l.Extend(context.Background(), 100*time.Millisecond) }()
		synctest.Wait() // applied on the server; the reply is slow
		end := serverEnd(t, b, "job")
		if d := l.Deadline(); d.After(end) {
			t.Errorf("while the shorter renewal waits for its reply, the local deadline is %v after the server's lease ends", d.Sub(end))
		}
		time.Sleep(time.Until(end) + time.Millisecond)
		if !errors.Is(l.Err(), ErrLost) {
			t.Errorf("after the server's lease ended: Err = %v; want ErrLost", l.Err())
		}
		close(b.release)
		<-extended
	})
}

func TestExtendWaitingForARenewalInFlightSendsNothingWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBackend{
			Backend: memory.NewBackend(),
			hold:    map[time.Duration]bool{500 * time.Millisecond: true},
			release: make(chan struct{}),
		}
		l, err := New(b, nil).TryAcquire(context.Background(), "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() { first <- l.Extend(context.Background(), 500*time.Millisecond) }()
		synctest.Wait()
		before := l.Deadline()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		if err := l.Extend(ctx, 800*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Extend behind a renewal in flight: %v; want the context's deadline", err)
		}
		if n := b.extends.Load(); n != 1 {
			t.Errorf("%d Extend requests sent; want only the first", n)
		}
		if d := l.Deadline(); !d.Equal(before) {
			t.Errorf("the deadline moved by %v for a renewal that was never sent", d.Sub(before))
		}
		close(b.release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	})
}

func TestConcurrentExtendsAnsweredInReverseOrderKeepTheEarlierDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBackend{
			Backend: memory.NewBackend(),
			hold:    map[time.Duration]bool{500 * time.Millisecond: true},
			release: make(chan struct{}),
		}
		l, err := New(b, nil).TryAcquire(context.Background(), "job", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		long := make(chan error, 1)
		go func() { long <- l.Extend(context.Background(), 500*time.Millisecond) }()
		synctest.Wait() // applied on the server; its reply waits
		time.Sleep(time.Millisecond)
		short := make(chan error, 1)
		go func() { short <- l.Extend(context.Background(), 100*time.Millisecond) }()
		synctest.Wait()
		time.Sleep(time.Millisecond)
		close(b.release) // the first renewal's reply comes back last
		if err := <-long; err != nil {
			t.Fatalf("Extend(500ms): %v", err)
		}
		if err := <-short; err != nil {
			t.Fatalf("Extend(100ms): %v", err)
		}
		end := serverEnd(t, b, "job")
		if d := l.Deadline(); d.After(end) {
			t.Fatalf("local deadline %v after the server's lease ends", d.Sub(end))
		}
	})
}

func TestErrAndDoneRightAfterAPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A calm simulated world: its process pause holds the deadline
		// timer too, as a stopped process does.
		w := newSimWorld(1)
		w.prof = simProfile{}
		p := &simProc{w: w, rng: w.rng}
		p.client = New(simBackend{p}, &Options{Queue: QueueOptions{Polling: true}})
		for _, check := range []struct {
			what string
			live func(l *Lease) bool
		}{
			{"Err", func(l *Lease) bool { return l.Err() == nil }},
			{"Done", func(l *Lease) bool {
				select {
				case <-l.Done():
					return false
				default:
					return true
				}
			}},
			{"Context().Err", func(l *Lease) bool { return l.Context().Err() == nil }},
			{"Context().Done", func(l *Lease) bool {
				select {
				case <-l.Context().Done():
					return false
				default:
					return true
				}
			}},
		} {
			l, err := p.client.TryAcquire(context.Background(), "job-"+check.what, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			p.pause(300 * time.Millisecond)
			if check.live(l) {
				t.Errorf("right after a pause past the deadline (%v ago), %s says live", time.Since(l.Deadline()), check.what)
			}
			if !errors.Is(l.Err(), ErrLost) || !errors.Is(l.Err(), errDeadlinePassed) {
				t.Errorf("%s: Err = %v; want ErrLost for the deadline", check.what, l.Err())
			}
		}
		time.Sleep(time.Second) // let the held deadline timers run out
	})
}

func TestPanickingObserverStillEndsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("observer panic")
		panicOnEnd := func(Event) { panic(boom) }
		c := New(memory.NewBackend(), &Options{Observer: &Observer{Released: panicOnEnd, Lost: panicOnEnd}})
		for _, end := range []string{"Release", "Err after the deadline"} {
			l, err := c.TryAcquire(context.Background(), "job-"+end, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			recovered := func() (r any) {
				defer func() { r = recover() }()
				if end == "Release" {
					_ = l.Release(context.Background())
				} else {
					l.mu.Lock()
					l.timer.Stop() // the deadline timer has not run yet
					l.deadline = time.Now()
					l.mu.Unlock()
					_ = l.Err()
				}
				return nil
			}()
			if recovered != boom {
				t.Errorf("%s: the Observer's panic did not reach the caller (recovered %v)", end, recovered)
			}
			select {
			case <-l.Done():
			default:
				t.Errorf("%s: the Observer panicked and Done stays open", end)
			}
		}
	})
}

// lateAcquireBackend answers its first Acquire with a timeout although the
// request is still on its way: it lands after delay, as a request whose
// caller gave up may.
type lateAcquireBackend struct {
	*memory.Backend
	delay time.Duration
	once  sync.Once
}

func (b *lateAcquireBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	first := false
	b.once.Do(func() { first = true })
	if !first {
		return b.Backend.Acquire(ctx, req)
	}
	go func() {
		time.Sleep(b.delay)
		_, _ = b.Backend.Acquire(context.Background(), req)
	}()
	return driver.Grant{}, driver.Transient(errors.New("i/o timeout"))
}

func TestAcquireAttemptLandingLateCapsLaterDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &lateAcquireBackend{Backend: memory.NewBackend(), delay: 50 * time.Millisecond}
		c := New(b, &Options{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
		l, err := c.Acquire(context.Background(), "job", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(b.delay) // the first attempt lands, with its 100ms
		end := serverEnd(t, b, "job")
		if d := l.Deadline(); d.After(end) {
			t.Fatalf("local deadline %v after the server's lease ends", d.Sub(end))
		}
		time.Sleep(time.Until(end) + time.Millisecond)
		if !errors.Is(l.Err(), ErrLost) {
			t.Fatalf("after the server's lease ended: Err = %v; want ErrLost", l.Err())
		}
	})
}
