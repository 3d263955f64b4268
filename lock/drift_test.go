package lock_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// TestDriftFactorIsHonouredOrRefused: every factor in (0, 1) sets the
// margin as asked (0.5 and more used to become 0.01 without a word), and
// one outside it, or one that leaves a TTL no usable life, is refused with
// ErrInvalid before anything is sent.
func TestDriftFactorIsHonouredOrRefused(t *testing.T) {
	const ttl = time.Second
	for _, factor := range []float64{0.01, 0.3, 0.5, 0.75, 0.9} {
		mem := memory.NewBackend()
		c := lock.New(mem, &lock.Options{DriftFactor: factor})
		before := time.Now()
		l, err := c.TryAcquire(context.Background(), "job", ttl)
		after := time.Now()
		if err != nil {
			t.Fatalf("DriftFactor %v: TryAcquire: %v", factor, err)
		}
		// The lease's start is read between before and after.
		life := ttl - time.Duration(factor*float64(ttl)) - 2*time.Millisecond // DriftMin's default
		if d := l.Deadline(); d.Before(before.Add(life)) || d.After(after.Add(life)) {
			t.Errorf("DriftFactor %v: local deadline %v after the call began (which took %v); want %v after the request",
				factor, d.Sub(before), after.Sub(before), life)
		}
		_ = l.Release(context.Background())
	}

	for _, tc := range []struct {
		name      string
		factor    float64
		keepAlive bool
	}{
		{"negative", -0.1, false},
		{"one", 1, false},
		{"above one", 1.5, false},
		{"NaN", math.NaN(), false},
		{"infinity", math.Inf(1), false},
		{"so close to 1 that the deadline comes before the start", 0.999, false},
		{"the largest float below 1", math.Nextafter(1, 0), false},
		{"close to 1, so the first renewal comes after the deadline", 0.9, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faultyBackend{Backend: memory.NewBackend()}
			c := lock.New(f, &lock.Options{DriftFactor: tc.factor, KeepAlive: tc.keepAlive})
			// Bound the test, not the code: a lease that should not exist
			// would make Do wait for it.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if l, err := c.TryAcquire(ctx, "job", ttl); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("TryAcquire: %v; want ErrInvalid", err)
				if l != nil {
					_ = l.Release(ctx)
				}
			}
			if err := c.Do(ctx, "job", ttl, func(context.Context, *lock.Lease) error { return nil }); !errors.Is(err, lock.ErrInvalid) {
				t.Errorf("Do: %v; want ErrInvalid", err)
			}
			if n := f.attempts.Load(); n != 0 {
				t.Errorf("%d requests sent; want 0", n)
			}
		})
	}
}
