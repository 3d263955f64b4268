package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

func TestTTLWithoutALocalLifetimeIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *lock.Options
		ttl  time.Duration
	}{
		{"default drift, 2ms", nil, 2 * time.Millisecond},
		{"DriftMin 300ms, 250ms", &lock.Options{DriftMin: 300 * time.Millisecond}, 250 * time.Millisecond},
		{"DriftMin equal to the TTL", &lock.Options{DriftMin: 100 * time.Millisecond}, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend()}
			c := lock.New(f, tc.opts)
			// Before the check these were retried for as long as the
			// context lasted: bound the test, not the code.
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			if _, err := c.Acquire(ctx, "job", tc.ttl); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("Acquire: %v; want ErrInvalid", err)
			}
			if _, err := c.TryAcquire(ctx, "job", tc.ttl); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("TryAcquire: %v; want ErrInvalid", err)
			}
			if err := c.Do(ctx, "job", tc.ttl, func(context.Context, *lock.Lease) error { return nil }); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("Do: %v; want ErrInvalid", err)
			}
			if n := f.attempts.Load(); n != 0 {
				t.Errorf("%d requests sent; want 0", n)
			}
		})
	}
}

func TestKeepAliveIntervalAfterTheDeadlineIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts lock.Options
	}{
		// Drift 40% + 2ms leaves 598ms of a 1s lease; a renewal at 900ms
		// is too late.
		{"renewal after the deadline", lock.Options{DriftFactor: 0.4, KeepAliveInterval: 0.9}},
		{"interval of a whole TTL", lock.Options{KeepAliveInterval: 1}},
		{"interval above 1", lock.Options{KeepAliveInterval: 1.5}},
		{"negative interval", lock.Options{KeepAliveInterval: -0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ttl = time.Second
			mem := memory.NewBackend()
			f := &faultyBackend{Backend: mem}
			ran := false
			err := lock.New(f, &tc.opts).Do(context.Background(), "job", ttl, func(context.Context, *lock.Lease) error { ran = true; return nil })
			if !errors.Is(err, lock.ErrInvalid) || ran {
				t.Errorf("Do: %v, fn ran %v; want ErrInvalid, fn not run", err, ran)
			}
			withKeepAlive := tc.opts
			withKeepAlive.KeepAlive = true
			if _, err := lock.New(f, &withKeepAlive).TryAcquire(context.Background(), "job", ttl); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("TryAcquire with KeepAlive: %v; want ErrInvalid", err)
			}
			if n := f.attempts.Load(); n != 0 {
				t.Errorf("%d requests sent; want 0", n)
			}
			// Without a keep-alive the interval is never used.
			l, err := lock.New(f, &tc.opts).TryAcquire(context.Background(), "job", ttl)
			if err != nil {
				t.Fatalf("TryAcquire without KeepAlive: %v", err)
			}
			_ = l.Release(context.Background())
		})
	}
}

func TestExtendRefusesAnUnusableTTL(t *testing.T) {
	f := &faultyBackend{Backend: memory.NewBackend()}
	l, err := lock.New(f, nil).TryAcquire(context.Background(), "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	before := l.Deadline()
	if err := l.Extend(context.Background(), 2*time.Millisecond); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Extend(2ms): %v; want ErrInvalid", err)
	}
	if n := f.extends.Load(); n != 0 {
		t.Fatalf("%d renewals sent; want 0", n)
	}
	if l.Err() != nil || !l.Deadline().Equal(before) {
		t.Fatalf("a refused Extend changed the lease: Err %v, deadline moved %v", l.Err(), l.Deadline().Sub(before))
	}
}
