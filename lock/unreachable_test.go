package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// refused is the error a dial to a closed port gives.
func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// fastRetries keeps the backoff short, so that a bound of a few hundred
// milliseconds sees many attempts.
func fastRetries(bound time.Duration) *lock.Options {
	return &lock.Options{MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, MaxUnreachable: bound}
}

// fastPolls is fastRetries for a Client that polls (see polling).
func fastPolls(bound time.Duration) *lock.Options {
	o := fastRetries(bound)
	o.Queue = polling
	return o
}

func TestAcquireGivesUpWhenTheBackendIsUnreachable(t *testing.T) {
	const bound = 200 * time.Millisecond
	for name, call := range map[string]func(*lock.Client) error{
		"Acquire": func(c *lock.Client) error {
			_, err := c.Acquire(context.Background(), "job", time.Minute)
			return err
		},
		"Do": func(c *lock.Client) error {
			return c.Do(context.Background(), "job", time.Minute, func(context.Context, *lock.Lease) error {
				return errors.New("fn ran without the lock")
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error { return refused() }}
			c := lock.New(f, fastPolls(bound))
			began := time.Now()
			err := await(t, run(func() error { return call(c) }), name+" against a refusing server under context.Background")
			elapsed := time.Since(began)
			if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("%s = %v; want ErrNotAcquired, ErrUnreachable and the refused connection", name, err)
			}
			if elapsed < bound-10*time.Millisecond {
				t.Fatalf("gave up after %v; want about the bound, %v", elapsed, bound)
			}
		})
	}
}

// TestMaxUnreachableCutsAHangingAttempt: a server that never answers (a
// dropped SYN) is bounded too, not only one that refuses at once.
func TestMaxUnreachableCutsAHangingAttempt(t *testing.T) {
	hang := &hangingAcquire{Backend: memory.NewBackend()}
	c := lock.New(hang, fastPolls(150*time.Millisecond))
	err := await(t, run(func() error {
		_, err := c.Acquire(context.Background(), "job", time.Minute)
		return err
	}), "Acquire against a server that never answers")
	if !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire = %v; want ErrNotAcquired and ErrUnreachable", err)
	}
}

// hangingAcquire never answers an Acquire before its context ends.
type hangingAcquire struct{ driver.Backend }

func (hangingAcquire) Acquire(ctx context.Context, _ driver.Request) (driver.Grant, error) {
	<-ctx.Done()
	return driver.Grant{}, fmt.Errorf("read tcp: i/o timeout: %w", ctx.Err())
}

func TestMaxUnreachableDoesNotBoundWaitingForAHolder(t *testing.T) {
	mem := memory.NewBackend()
	const holderTTL = 300 * time.Millisecond
	if _, err := takeLock(context.Background(), mem, "job", "holder", holderTTL); err != nil {
		t.Fatal(err)
	}
	c := lock.New(mem, fastRetries(50*time.Millisecond))
	began := time.Now()
	l, err := c.Acquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatalf("Acquire while a holder's lease runs out: %v; want the lock once it expired", err)
	}
	defer l.Release(context.Background())
	if waited := time.Since(began); waited < holderTTL-20*time.Millisecond {
		t.Fatalf("acquired after %v; the holder's lease lasted %v", waited, holderTTL)
	}
}

// TestMaxUnreachableIgnoresTheBackoffAfterAnAnswer: the pause Acquire takes
// after an ErrHeld is its own choice, not the backend's silence; a bound
// shorter than that pause (or a stall of the process) must not turn waiting
// for a holder into ErrUnreachable.
func TestMaxUnreachableIgnoresTheBackoffAfterAnAnswer(t *testing.T) {
	mem := memory.NewBackend()
	const holderTTL = 600 * time.Millisecond
	if _, err := takeLock(context.Background(), mem, "job", "holder", holderTTL); err != nil {
		t.Fatal(err)
	}
	// Pauses of up to 200ms between attempts, against a bound of 20ms.
	c := lock.New(mem, &lock.Options{MinBackoff: 200 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxUnreachable: 20 * time.Millisecond})
	err := await(t, run(func() error {
		l, err := c.Acquire(context.Background(), "job", time.Minute)
		if err == nil {
			_ = l.Release(context.Background())
		}
		return err
	}), "Acquire while a holder's lease runs out")
	if err != nil {
		t.Fatalf("Acquire = %v; want the lock once the holder's lease expired", err)
	}
}

// TestMaxUnreachableCountsFromTheLastAnswer: an ErrHeld reply is an answer
// about the lock, so the bound counts from the last one, not from the call.
// The lock is held for longer than the bound, then the server goes away.
func TestMaxUnreachableCountsFromTheLastAnswer(t *testing.T) {
	const heldFor, bound, maxBackoff = 300 * time.Millisecond, 200 * time.Millisecond, 10 * time.Millisecond
	began := time.Now()
	var lastHeld atomic.Int64 // nanoseconds after began
	f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error {
		if since := time.Since(began); since < heldFor {
			lastHeld.Store(int64(since))
			return &driver.HeldError{Name: "job"}
		}
		return refused()
	}}
	c := lock.New(f, fastPolls(bound))
	err := await(t, run(func() error {
		_, err := c.Acquire(context.Background(), "job", time.Minute)
		return err
	}), "Acquire against a server that stopped answering")
	elapsed := time.Since(began)
	if !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Acquire = %v; want ErrUnreachable with the refused connection", err)
	}
	// Acquire gives up when the next attempt would start after the bound,
	// so at most one backoff early, counted from the last ErrHeld.
	if unanswered := elapsed - time.Duration(lastHeld.Load()); unanswered < bound-maxBackoff {
		t.Fatalf("gave up %v after the last ErrHeld (%v after the call began); want at least %v", unanswered, elapsed, bound-maxBackoff)
	}
}

func TestMaxUnreachableCanBeTurnedOff(t *testing.T) {
	for name, tc := range map[string]struct {
		opts *lock.Options
		call []lock.CallOption
	}{
		"WithMaxUnreachable(0)":      {fastPolls(20 * time.Millisecond), []lock.CallOption{lock.WithMaxUnreachable(0)}},
		"Options.MaxUnreachable < 0": {fastPolls(-1), nil},
	} {
		t.Run(name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error { return refused() }}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := lock.New(f, tc.opts).Acquire(ctx, "job", time.Minute, tc.call...)
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lock.ErrUnreachable) {
				t.Fatalf("Acquire = %v; want it to retry until the context ended", err)
			}
		})
	}
}

func TestWithMaxUnreachableOverridesTheClient(t *testing.T) {
	var attempts atomic.Int64
	f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error { attempts.Add(1); return refused() }}
	c := lock.New(f, fastPolls(-1)) // no bound for the Client
	err := await(t, run(func() error {
		_, err := c.Acquire(context.Background(), "job", time.Minute, lock.WithMaxUnreachable(100*time.Millisecond))
		return err
	}), "Acquire WithMaxUnreachable against a refusing server")
	if !errors.Is(err, lock.ErrUnreachable) {
		t.Fatalf("Acquire with WithMaxUnreachable = %v; want ErrUnreachable", err)
	}
	attempts.Store(0)
	if _, err := c.Acquire(context.Background(), "job", time.Minute, lock.WithMaxUnreachable(-time.Second)); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("WithMaxUnreachable(-1s) = %v; want ErrInvalid", err)
	}
	if n := attempts.Load(); n != 0 {
		t.Fatalf("%d attempt(s) sent with an invalid option", n)
	}
}

// refusingQueue is a backend whose every Acquire with a place in line
// fails to reach the server.
type refusingQueue struct{ *memory.Backend }

func (r refusingQueue) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Place > 0 {
		return driver.Grant{}, refused()
	}
	return r.Backend.Acquire(ctx, req)
}

// TestQueuedAcquireGivesUpWhenTheBackendIsUnreachable: a backend with
// queued waiting gets the same bound as a polled one.
func TestQueuedAcquireGivesUpWhenTheBackendIsUnreachable(t *testing.T) {
	const bound = 200 * time.Millisecond
	c := lock.New(refusingQueue{memory.NewBackend()}, fastRetries(bound))
	err := await(t, run(func() error {
		_, err := c.Acquire(context.Background(), "job", time.Minute)
		return err
	}), "a queued Acquire against a refusing server under context.Background")
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Acquire = %v; want ErrNotAcquired, ErrUnreachable and the refused connection", err)
	}
}

// TestQueuedWaitingIsNotBoundedByMaxUnreachable: a waiter kept in line is
// answered by the backend at every renewal of its place, so it waits for
// the holder past the bound.
func TestQueuedWaitingIsNotBoundedByMaxUnreachable(t *testing.T) {
	const bound = 100 * time.Millisecond
	ctx := context.Background()
	b := memory.NewBackend()
	if _, err := takeLock(ctx, b, "job", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	opts := fastRetries(bound)
	opts.Queue.PlaceTTL = 30 * time.Millisecond // renewals every 10 ms
	c := lock.New(b, opts)
	got := run(func() error {
		l, err := c.Acquire(ctx, "job", time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	})
	// Wait until the waiter has renewed its place for several bounds.
	deadline := time.Now().Add(5 * bound)
	for time.Now().Before(deadline) {
		select {
		case err := <-got:
			t.Fatalf("Acquire returned %v while the holder still held the lock", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := releaseLock(ctx, b, "job", "holder"); err != nil {
		t.Fatal(err)
	}
	if err := await(t, got, "the waiter after the release"); err != nil {
		t.Fatalf("waiter: %v", err)
	}
}
