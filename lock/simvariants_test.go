//go:build fencekit_broken

package lock

import (
	"testing"
	"time"
)

// simVariantBudget is how many schedules a broken variant may take before
// the simulation catches it; each is caught well within it (the test logs
// how soon), and far within the 100,000 schedules of CI's long run.
const simVariantBudget = 3000

// simVariants are the deliberately broken clients of simhooks.go, by the
// name that -sim.variant takes. They exist only in the build tagged
// fencekit_broken; TestBrokenVariantsAreCaught runs this file's test in
// that build from a plain go test.
var simVariants = []struct {
	name string
	flag *bool
}{
	{"deadline-after-reply", &broken.deadlineAfterReply},
	{"late-extend-accepted", &broken.lateExtendAccepted},
	{"keepalive-never-loses", &broken.keepAliveNeverLoses},
	{"do-keeps-lock-on-panic", &broken.doKeepsLockOnPanic},
	{"lead-keeps-lost-term", &broken.leadKeepsLostTerm},
	{"shorter-extend-later", &broken.shorterExtendLater},
}

// TestSimulationCatchesBrokenVariants switches on each deliberately broken
// client and runs schedules from seed 1 until one breaks an invariant: the
// simulation can fail, for each bug it is meant to find.
func TestSimulationCatchesBrokenVariants(t *testing.T) {
	for _, v := range simVariants {
		t.Run(v.name, func(t *testing.T) {
			*v.flag = true
			defer func() { *v.flag = false }()
			start := time.Now()
			for seed := uint64(1); seed <= simVariantBudget; seed++ {
				w, panicked := runScheduleInBubble(t, seed)
				if msg := w.report(panicked); msg != "" {
					// One short line: the report reads like a failure in
					// a passing run's log. The replay prints it.
					t.Logf("caught at seed %d, after %v (see: go test%s%s ./lock -run 'TestSimulation$' -seed %d -sim.variant=%s)", seed, time.Since(start).Round(time.Millisecond), simRaceFlag(), simTagsFlag(), seed, v.name)
					return
				}
			}
			t.Errorf("not caught in %d schedules (%v)", simVariantBudget, time.Since(start).Round(time.Millisecond))
		})
	}
}

// setSimVariant switches on the variant that -sim.variant names, for a
// replay; it returns a function that switches it off again.
func setSimVariant(t *testing.T, name string) func() {
	for _, v := range simVariants {
		if v.name == name {
			*v.flag = true
			return func() { *v.flag = false }
		}
	}
	t.Fatalf("-sim.variant=%s: no such variant", name)
	return nil
}
