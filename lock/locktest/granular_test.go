package locktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// granule is the unit of the coarse backends below: long enough that the
// rounding shows, short enough that the suite stays fast.
const granule = 100 * time.Millisecond

// coarse is a backend whose server keeps TTLs in granules: it passes every
// TTL through round before the memory backend sees it. It declares no
// granularity; declared does.
type coarse struct {
	lock.Backend
	round func(time.Duration) time.Duration
}

func (c *coarse) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if ttl < lock.MinTTL {
		return c.Backend.Acquire(ctx, name, owner, ttl) // refused as it is
	}
	return c.Backend.Acquire(ctx, name, owner, c.round(ttl))
}

func (c *coarse) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	if ttl < lock.MinTTL {
		return c.Backend.Extend(ctx, name, owner, ttl)
	}
	return c.Backend.Extend(ctx, name, owner, c.round(ttl))
}

// declared is a coarse backend that declares granularity g.
type declared struct {
	*coarse
	g time.Duration
}

func (d *declared) TTLGranularity() time.Duration { return d.g }

var _ locktest.Granular = (*declared)(nil)

func roundUp(unit time.Duration) func(time.Duration) time.Duration {
	return func(d time.Duration) time.Duration { return (d + unit - 1) / unit * unit }
}

func roundDown(unit time.Duration) func(time.Duration) time.Duration {
	return func(d time.Duration) time.Duration { return max(d/unit*unit, unit) }
}

func newCoarse(round func(time.Duration) time.Duration) *coarse {
	return &coarse{Backend: memory.NewBackend(), round: round}
}

// A backend that rounds TTLs up to its declared granularity passes every
// check, while the same backend without the declaration, one that rounds up
// further than it declares, and one that rounds down (a lease ending before
// its TTL) are each caught.
func TestGranularity(t *testing.T) {
	cases := []struct {
		name     string
		backend  lock.Backend
		mustFail []string // nil: must pass every check
	}{
		{"rounds up within its declared granularity", &declared{newCoarse(roundUp(granule)), granule}, nil},
		{"rounds up a granule and declares none", newCoarse(roundUp(granule)), []string{"ExtendSetsTTLFromNow"}},
		{"rounds up three granules and declares one", &declared{newCoarse(roundUp(3 * granule)), granule}, []string{"InspectReportsRemainingTTL", "ExtendSetsTTLFromNow"}},
		{"rounds down and declares the granule", &declared{newCoarse(roundDown(granule)), granule}, []string{"LeaseLastsItsTTL"}},
	}
	backends := make([]lock.Backend, len(cases))
	for i, c := range cases {
		backends[i] = c.backend
	}
	results := failuresOfAll(backends)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed := results[i]
			if c.mustFail == nil {
				for _, n := range names(failed) {
					t.Errorf("%s: %v", n, failed[n])
				}
				return
			}
			for _, check := range c.mustFail {
				if !caught(failed, check) {
					t.Errorf("check %s passed on a backend that %s", check, c.name)
				}
			}
			t.Logf("caught by %v", names(failed))
		})
	}
}
