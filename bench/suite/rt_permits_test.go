package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// lockOnly is a driver that offers locks and no permits, as a third-party
// backend may: its Acquire answers driver.ErrUnsupported for every permit
// kind and changes nothing.
type lockOnly struct{ driver.Backend }

func (l lockOnly) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind.Permit() {
		return driver.Grant{}, fmt.Errorf("%w: lockOnly has no %s permits", driver.ErrUnsupported, req.Kind)
	}
	return l.Backend.Acquire(ctx, req)
}

// The permit cases run on the memory adapter (no round trips to count,
// but the operations and their checks run as on a server), and on a
// backend that answers driver.ErrUnsupported for permits they are reported
// Unsupported, not failed, while their baseline is counted.
func TestPermitCasesOnMemory(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		backend driver.Backend
		permits bool
	}{
		{"Permits", memory.NewBackend(), true},
		{"LockOnly", lockOnly{memory.NewBackend()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &RTEnv{Env: &Env{Prefix: "t"}, counter: &Counter{}}
			fk := func(*RTEnv) *lock.Client { return lock.New(tc.backend, nil) }
			cases := permitRTCases("Memory", "mem", fk)
			if len(cases) != 4 {
				t.Fatalf("%d permit cases; want the baseline and three permit kinds", len(cases))
			}
			for _, c := range cases {
				res := measureCase(ctx, r, c)
				if res.Err != nil {
					t.Errorf("%s / %s: %v", c.Op, c.Lib, res.Err)
					continue
				}
				wantUnsupported := !tc.permits && c.Op != OpLockCycle
				if got := res.Unsupported != ""; got != wantUnsupported {
					t.Errorf("%s: unsupported %v (%q); want %v", c.Op, got, res.Unsupported, wantUnsupported)
				}
				if wantUnsupported && !strings.Contains(res.Unsupported, "has no") {
					t.Errorf("%s: Unsupported %q does not say why", c.Op, res.Unsupported)
				}
				if !wantUnsupported && (res.RoundTrips != 0 || res.Micros < 0) {
					t.Errorf("%s on memory: %v round trips, %v µs", c.Op, res.RoundTrips, res.Micros)
				}
			}
		})
	}
}
