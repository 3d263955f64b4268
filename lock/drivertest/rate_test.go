package drivertest_test

import "testing"

// TestRacyBugsCaughtInOneRun runs the check that must catch each racy bug of
// the gallery once, without retries: run it with -count=100 to measure the
// catch rate of a single run.
func TestRacyBugsCaughtInOneRun(t *testing.T) {
	for _, g := range gallery {
		if !g.racy {
			continue
		}
		t.Run(g.bug, func(t *testing.T) {
			t.Parallel()
			for _, check := range g.mustFail {
				if err := runCheck(checkNamed(check), newFlawed(g.f)); err == nil {
					t.Errorf("check %s passed on a backend that %s", check, g.bug)
				}
			}
		})
	}
}
