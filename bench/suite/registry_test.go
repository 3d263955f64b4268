package suite

import (
	"math"
	"strings"
	"testing"
)

// Every case belongs to a declared group, IDs are unique, and every group
// has exactly one baseline to compare with.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	baselines := map[string]int{}
	for _, c := range Cases() {
		if _, ok := GroupByID(c.Group); !ok {
			t.Errorf("case %s: undeclared group", c.ID())
		}
		if seen[c.ID()] {
			t.Errorf("duplicate case %s", c.ID())
		}
		seen[c.ID()] = true
		if c.Baseline {
			baselines[c.Group]++
		}
	}
	for _, g := range Groups() {
		if baselines[g.ID] != 1 {
			t.Errorf("group %s has %d baselines, want 1", g.ID, baselines[g.ID])
		}
	}
	cs := Cases()
	for i := 1; i < len(cs); i++ {
		if cs[i].Group == cs[i-1].Group && cs[i].Baseline {
			t.Errorf("baseline %s is not first in its group", cs[i].ID())
		}
	}
}

func TestSpread(t *testing.T) {
	s := Spread([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if s.Min != 2 || s.Max != 9 || s.Mean != 5 || math.Abs(s.StdDev-2) > 1e-12 {
		t.Errorf("Spread = %+v, want min 2, max 9, mean 5, stddev 2", s)
	}
	if (Spread(nil) != SpreadStats{}) {
		t.Errorf("Spread(nil) = %+v", Spread(nil))
	}
}

func TestPercentile(t *testing.T) {
	xs := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]int64{50: 5, 90: 9, 100: 10, 0: 1, 1: 1} {
		if got := Percentile(xs, p); got != want {
			t.Errorf("Percentile(%v) = %d, want %d", p, got, want)
		}
	}
	if got := Percentile([]int64{7}, 90); got != 7 {
		t.Errorf("Percentile of one = %d", got)
	}
}

func TestTrimmedMean(t *testing.T) {
	if got := TrimmedMean([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 100}, 0.9); got != 5 {
		t.Errorf("TrimmedMean = %v, want 5 (the outlier left out)", got)
	}
	if got := TrimmedMean([]float64{2, 4}, 1); got != 3 {
		t.Errorf("TrimmedMean(all) = %v, want 3", got)
	}
	if !math.IsNaN(TrimmedMean(nil, 0.9)) {
		t.Errorf("TrimmedMean(nil) is not NaN")
	}
}

func TestSignature(t *testing.T) {
	long := strings.Repeat("v", 200)
	a := Signature(argStrings([]any{"EVALSHA", "abc", 2, "k1", "k2", int64(10000), []byte(long)}))
	b := Signature([]string{"evalsha", "abc", "2", "k1", "k2", "10000", long[:128]})
	if a != b {
		t.Errorf("client and SLOWLOG forms differ:\n%q\n%q", a, b)
	}
	if Signature([]string{"get", "a b"}) == Signature([]string{"get", "a", "b"}) {
		t.Errorf("signatures must not collide on spaces")
	}
}
