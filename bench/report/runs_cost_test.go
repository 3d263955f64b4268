package report

import (
	"math"
	"strings"
	"testing"
)

// Ratios pair within a round; each run's median ratio gives the spread over
// runs, which the table and the targets show next to the pooled median.
func TestRunRatioSpread(t *testing.T) {
	var base, x []Sample
	// Run 1: x is 1.1× in every round; run 2: 1.3×; run 3: 1.2×.
	for run, r := range []float64{1.1, 1.3, 1.2} {
		for k := 0; k < 3; k++ {
			round := 3*run + k + 1
			base = append(base, Sample{Round: round, Run: run + 1, NsPerOp: 100 * float64(k+1)})
			x = append(x, Sample{Round: round, Run: run + 1, NsPerOp: 100 * float64(k+1) * r})
		}
	}
	g := Summarize(Group{ID: "g", Kind: Throughput, Rows: []Row{{Name: "base", Baseline: true, Samples: base}, {Name: "x", Samples: x}}})
	row, _ := g.Row("x")
	if row.Runs != 3 || math.Abs(row.RunRatio.Min-1.1) > 1e-9 || math.Abs(row.RunRatio.Max-1.3) > 1e-9 || math.Abs(row.RunRatio.Median-1.2) > 1e-9 {
		t.Errorf("run ratio %+v over %d runs, want 1.1–1.3 (median 1.2) over 3", row.RunRatio, row.Runs)
	}
	if table := GroupTable(g); !strings.Contains(table, "1.10–1.30 (runs 1.10–1.30)") {
		t.Errorf("table lacks the runs' range:\n%s", table)
	}
	res := Evaluate([]Target{{Name: "x fast", Group: "g", Row: "x", Limit: 1.25}}, []GroupSummary{g})
	if !res[0].Met || res[0].Spread.Min != row.RunRatio.Min || res[0].Spread.Max != row.RunRatio.Max {
		t.Errorf("target %+v", res[0])
	}
	if table := TargetTable(res); !strings.Contains(table, "| x fast | 1.20× | 1.10–1.30 | met |") {
		t.Errorf("target table:\n%s", table)
	}

	// One run: no spread over runs is claimed.
	one := Summarize(Group{ID: "g", Kind: Throughput, Rows: []Row{{Name: "base", Baseline: true, Samples: base[:3]}, {Name: "x", Samples: x[:3]}}})
	if r, _ := one.Row("x"); !math.IsNaN(r.RunRatio.Min) || strings.Contains(GroupTable(one), "runs") {
		t.Errorf("one run reported a spread over runs: %+v", r.RunRatio)
	}
}

// Server-time rows compare with their job's floor and reference rows
// within each repeat; a failed row shows its error and no ratio.
func TestSummarizeCost(t *testing.T) {
	rep := func(floor, fk, ref float64) []CostSample {
		return []CostSample{
			{Job: "w", Name: "floor", Floor: true, Usec: floor, Commands: 1},
			{Job: "w", Name: "fencekit", Usec: fk, Commands: 1},
			{Job: "w", Name: "plain: no fence", Ref: true, Usec: ref, Commands: 1},
			{Job: "l", Name: "lock floor", Floor: true, Usec: 4, Commands: 2},
			{Job: "l", Name: "broken", Err: "boom"},
		}
	}
	rows := SummarizeCost([][]CostSample{rep(2, 2.2, 0.5), rep(4, 4.0, 1), rep(3, 3.6, 1)})
	fk, ok := costRow(rows, "w", "fencekit")
	if !ok {
		t.Fatal("no fencekit row")
	}
	// Ratios 1.1, 1.0, 1.2 to the floor; 4.4, 4, 3.6 to the reference.
	if math.Abs(fk.Ratio.Median-1.1) > 1e-9 || math.Abs(fk.Ratio.Min-1.0) > 1e-9 || math.Abs(fk.Ratio.Max-1.2) > 1e-9 {
		t.Errorf("ratio to floor %+v", fk.Ratio)
	}
	if vs := fk.Vs["plain: no fence"]; math.Abs(vs.Median-4) > 1e-9 || math.Abs(vs.Min-3.6) > 1e-9 {
		t.Errorf("ratio to the reference %+v", vs)
	}
	if fk.Usec.Median != 3.6 || fk.Repeats != 3 {
		t.Errorf("usec %+v over %d repeats", fk.Usec, fk.Repeats)
	}
	res := EvaluateCost([]CostTarget{
		{Name: "fk ≤ 1.05× floor", Job: "w", Row: "fencekit", Limit: 1.05},
		{Name: "fk ≤ 5× plain", Job: "w", Row: "fencekit", Vs: "plain: no fence", Limit: 5},
		{Name: "broken", Job: "l", Row: "broken", Limit: 1},
	}, rows)
	if res[0].Met || math.Abs(res[0].Value-1.1) > 1e-9 || res[0].Spread.Max != 1.2 {
		t.Errorf("floor target %+v", res[0])
	}
	if !res[1].Met || res[1].Value != 4 {
		t.Errorf("reference target %+v", res[1])
	}
	if res[2].Met || !math.IsNaN(res[2].Value) {
		t.Errorf("a failed row met its target: %+v", res[2])
	}
	table := CostTable(rows)
	for _, want := range []string{
		"| w | server time per op | range | commands | × floor | range | × plain |",
		"| **floor** | 3.00 µs | 2.00 µs–4.00 µs | 1 | 1.00× | – | – |",
		"| fencekit | 3.60 µs | 2.20 µs–4.00 µs | 1 | 1.10× | 1.00–1.20 | 4.00× (3.60–4.40) |",
		"| broken | error: boom |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("cost table lacks %q:\n%s", want, table)
		}
	}
}
