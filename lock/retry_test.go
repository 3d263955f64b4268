package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

func TestPermanentAcquireErrorIsNotRetried(t *testing.T) {
	for name, call := range map[string]func(*lock.Client) error{
		"Acquire": func(c *lock.Client) error {
			_, err := c.Acquire(context.Background(), "job", time.Minute)
			return err
		},
		"TryAcquire": func(c *lock.Client) error {
			_, err := c.TryAcquire(context.Background(), "job", time.Minute)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(int) error { return errPermanent }}
			rec := &recorder{}
			c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, Observer: rec.observer(), Queue: polling})
			err := await(t, run(func() error { return call(c) }), name+" under context.Background")
			if !errors.Is(err, errPermanent) || !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("%s: %v; want ErrNotAcquired with the cause", name, err)
			}
			if n := f.attempts.Load(); n != 1 {
				t.Fatalf("%d attempts; want 1", n)
			}
			if n := len(rec.of("retrying")); n != 0 {
				t.Fatalf("%d retry events for an error that is not retried", n)
			}
		})
	}
}

func TestTransientAcquireErrorIsRetriedAndReported(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), acquireFail: func(n int) error {
		if n <= 2 {
			return errNetwork
		}
		return nil
	}}
	rec := &recorder{}
	c := lock.New(f, &lock.Options{MinBackoff: time.Millisecond, Observer: rec.observer(), Queue: polling})
	l, err := c.Acquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer l.Release(context.Background())
	if n := f.attempts.Load(); n != 3 {
		t.Fatalf("%d attempts; want 3", n)
	}
	retries := rec.of("retrying")
	if len(retries) != 2 {
		t.Fatalf("%d retry events; want 2", len(retries))
	}
	for i, e := range retries {
		if e.Attempt != i+1 || !errors.Is(e.Err, errNetwork) || e.Name != "job" || e.Token != 0 {
			t.Errorf("retry event %d: %+v; want attempt %d with the network error", i, e, i+1)
		}
	}
}

func TestAcquireReportsRetriesWhileHeld(t *testing.T) {
	mem := memory.NewBackend()
	if _, err := takeLock(context.Background(), mem, "job", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	c := lock.New(mem, &lock.Options{MinBackoff: time.Millisecond, MaxAttempts: 3, Observer: rec.observer()})
	if _, err := c.Acquire(context.Background(), "job", time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Acquire: %v; want ErrHeld", err)
	}
	retries := rec.of("retrying")
	if len(retries) != 2 { // the third and last attempt is not retried
		t.Fatalf("%d retry events; want 2", len(retries))
	}
	for _, e := range retries {
		if !errors.Is(e.Err, lock.ErrHeld) {
			t.Errorf("retry event %+v; want ErrHeld", e)
		}
	}
}

func TestKeepAliveLosesTheLeaseOnAPermanentRenewalError(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend(), extendErr: func() error { return errPermanent }}
	rec := &recorder{}
	c := lock.New(f, &lock.Options{KeepAlive: true, Observer: rec.observer()})
	// The first renewal comes after a third of the TTL; the local deadline
	// is two thirds later: ample room to tell "at once" from "at the
	// deadline".
	const ttl = 3 * time.Second
	l, err := c.TryAcquire(context.Background(), "job", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	deadline := l.Deadline()
	await(t, l.Done(), "loss after a permanent renewal error")
	if lostAt := time.Now(); !lostAt.Before(deadline) {
		t.Fatalf("lost %v after the local deadline; want at the first failed renewal", lostAt.Sub(deadline))
	}
	if !errors.Is(l.Err(), lock.ErrLost) || !errors.Is(l.Err(), errPermanent) {
		t.Fatalf("Err = %v; want ErrLost with the renewal's error", l.Err())
	}
	if n := f.extends.Load(); n != 1 {
		t.Fatalf("%d renewals sent; want 1, a permanent error is not retried", n)
	}
}
