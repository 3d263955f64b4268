package lock

import (
	"slices"
	"testing"
)

// simBugSeeds are schedules in which the simulation found the bugs of issue
// 21 points 5 and 6 on the code before their fix. While a bug is known
// (simKnownBugs), its seed must still show it: the harness can fail. Once
// fixed, the seed must run clean: it is a regression test.
var simBugSeeds = []struct {
	kind string
	seed uint64
}{
	{simBugExtendUnknown, 22},
	{simBugExtendReordered, 199},
	{simBugErrAfterPause, 2},
}

func TestSimulationFindsKnownBugs(t *testing.T) {
	for _, tc := range simBugSeeds {
		w, panicked := runScheduleInBubble(t, tc.seed)
		found := slices.ContainsFunc(w.violations, func(v simViolation) bool { return v.kind == tc.kind })
		switch {
		case simKnownBugs[tc.kind] && !found:
			t.Errorf("seed %d no longer shows the known bug %s (violations: %v, panic: %v)", tc.seed, tc.kind, w.violations, panicked)
		case !simKnownBugs[tc.kind] && found:
			t.Errorf("seed %d shows the fixed bug %s again:\n%s", tc.seed, tc.kind, w.report(panicked))
		}
	}
}
