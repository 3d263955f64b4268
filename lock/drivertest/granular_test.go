package drivertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// granule is the unit of the coarse backends below: long enough that the
// rounding shows, short enough that the suite stays fast.
const granule = 100 * time.Millisecond

// coarse is a backend whose server keeps TTLs in granules: it passes every
// TTL through round before the memory backend sees it. Whether the suite
// is told its granularity (drivertest.TTLGranularity) is up to each case.
type coarse struct {
	driver.Backend
	round func(time.Duration) time.Duration
}

func (c *coarse) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	req.TTL = c.round(req.TTL)
	return c.Backend.Acquire(ctx, req)
}

func (c *coarse) Extend(ctx context.Context, cl driver.Claim, ttl time.Duration) error {
	return c.Backend.Extend(ctx, cl, c.round(ttl))
}

func roundUp(unit time.Duration) func(time.Duration) time.Duration {
	return func(d time.Duration) time.Duration { return (d + unit - 1) / unit * unit }
}

func roundDown(unit time.Duration) func(time.Duration) time.Duration {
	return func(d time.Duration) time.Duration { return max(d/unit*unit, unit) }
}

func newCoarse(round func(time.Duration) time.Duration) *coarse {
	return &coarse{Backend: memory.NewBackend(), round: round}
}

// A backend that rounds TTLs up to the granularity declared to the suite
// (drivertest.TTLGranularity) passes every check, while the same backend
// run without the option, one that rounds up further than declared, and one
// that rounds down (a lease ending before its TTL) are each caught.
func TestGranularity(t *testing.T) {
	declared := drivertest.TTLGranularity(granule)
	cases := []struct {
		name     string
		backend  driver.Backend
		opts     []drivertest.Option // what the suite is told
		mustFail []string            // nil: must pass every check
	}{
		{"rounds up within its declared granularity", newCoarse(roundUp(granule)), []drivertest.Option{declared}, nil},
		{"rounds up a granule and declares none", newCoarse(roundUp(granule)), nil, []string{"ExtendSetsTTLFromNow"}},
		{"rounds up three granules and declares one", newCoarse(roundUp(3 * granule)), []drivertest.Option{declared}, []string{"InspectReportsRemainingTTL", "ExtendSetsTTLFromNow"}},
		{"rounds down and declares the granule", newCoarse(roundDown(granule)), []drivertest.Option{declared}, []string{"LeaseLastsItsTTL"}},
	}
	backends := make([]driver.Backend, len(cases))
	checks := make([][]drivertest.Check, len(cases))
	for i, c := range cases {
		backends[i], checks[i] = c.backend, drivertest.Checks(c.opts...)
	}
	results := failuresOfEach(backends, checks, true)
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
