package containers

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that records whether it was failed or skipped
// instead of ending the goroutine.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Skipf(string, ...any)  { r.skipped = true }

// TestUnavailable checks that a missing Docker engine skips the tests, and
// fails them under FENCEKIT_REQUIRE_CONTAINERS=1.
func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		require            string
		wantFail, wantSkip bool
	}{{"", false, true}, {"1", true, false}} {
		t.Run("require="+c.require, func(t *testing.T) {
			t.Setenv(RequireEnv, c.require)
			r := &recorder{TB: t}
			unavailable(r, "Redis", errors.New("no Docker"))
			if r.failed != c.wantFail || r.skipped != c.wantSkip {
				t.Errorf("failed %v, skipped %v; want %v, %v", r.failed, r.skipped, c.wantFail, c.wantSkip)
			}
		})
	}
}
