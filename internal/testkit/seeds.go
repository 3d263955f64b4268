package testkit

import (
	"fmt"
	"strings"
	"testing"
)

// SomeSeedShows is for tests that must see a failure happen: a chaos run
// over a broken store or without fencing, whose pauses are random and whose
// timing is real. One run can end before two workers overlap, so a fixed
// seed alone does not make the test reliable on a loaded machine. It runs
// try with seeds 1 to n in turn and returns at the first that shows what
// the test wants (try returns true); if none does, it fails the test with
// what every run reported. n runs that all miss mean the run is broken, not
// unlucky.
func SomeSeedShows(t testing.TB, n int, what string, try func(seed uint64) (shown bool, report string)) {
	t.Helper()
	var reports []string
	for seed := uint64(1); seed <= uint64(n); seed++ {
		shown, report := try(seed)
		if shown {
			if seed > 1 {
				t.Logf("%s: shown with seed %d, after %d runs that missed", what, seed, seed-1)
			}
			return
		}
		reports = append(reports, fmt.Sprintf("seed %d:\n%s", seed, report))
	}
	t.Fatalf("%s: none of %d runs showed it:\n%s", what, n, strings.Join(reports, "\n"))
}
