// Package report turns benchmark samples into the tables and the plot of
// docs/benchmarks.md. Everything in it is a pure function of its inputs, so
// that it can be tested without servers.
package report

import (
	"math"
	"sort"
)

// Kind says which number heads a group: the same values as suite.Kind.
type Kind int

const (
	Latency    Kind = iota // ns/op; lower is better
	Throughput             // ops/s (ns/op is wall time per op across workers)
	Contention             // acq/s; higher is better
)

// Sample is one measurement of one row, taken in one round. Rows of a
// group measured in the same round are compared with each other.
type Sample struct {
	// Round numbers the rounds across the whole command (unique over runs);
	// Run is the run (fresh servers, warm-up, rounds) the round belonged to.
	Round       int
	Run         int
	NsPerOp     float64
	AllocsPerOp float64
	BytesPerOp  float64
	Extra       map[string]float64 // b.ReportMetric values, by unit
}

// Row is one implementation in a group.
type Row struct {
	Name     string
	Baseline bool
	Samples  []Sample
}

// Group is a set of rows compared with its baseline row.
type Group struct {
	ID, Title, Note string
	Kind            Kind
	NoPlot          bool // leave it out of the plot (in-process rows, say)
	Rows            []Row
}

// Stat is the median and range of a set of numbers.
type Stat struct{ Median, Min, Max float64 }

// Spread is the half-range relative to the median: (max-min)/2/median.
func (s Stat) Spread() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / 2 / s.Median
}

// NewStat summarises xs; NaNs are ignored. An empty set gives NaNs.
func NewStat(xs []float64) Stat {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Stat{math.NaN(), math.NaN(), math.NaN()}
	}
	sort.Float64s(v)
	return Stat{Median: median(v), Min: v[0], Max: v[len(v)-1]}
}

// Median returns the median of xs (the mean of the middle two for an even
// count), ignoring NaNs; NaN for none.
func Median(xs []float64) float64 { return NewStat(xs).Median }

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// Metric names reported by the suite.
const (
	MetricOpsPerSec = "ops/s"
	MetricAcqPerSec = "acq/s"
	MetricWinPct    = "win-%"
	MetricWorkerMin = "worker-min-acq/s"
	MetricWorkerMax = "worker-max-acq/s"
	MetricWorkerSD  = "worker-sd-acq/s"
	MetricWorkerCV  = "worker-cv-%"
	// MetricP50 and MetricP90 are per-operation latency percentiles, in ns.
	MetricP50 = "p50-ns"
	MetricP90 = "p90-ns"
	// MetricServerCPU is the server's CPU time per operation, in µs.
	MetricServerCPU = "server-cpu-µs/op"
)

// RowSummary is a row's medians over its rounds.
type RowSummary struct {
	Name     string
	Baseline bool
	Rounds   int
	Ns       Stat
	// Ratio is the median over rounds of this row's headline metric divided
	// by the baseline's in the same round: time for Latency and Throughput
	// (lower is better), acq/s for Contention (higher is better). NaN
	// without a baseline sample in the same round.
	Ratio Stat
	// RunRatio is the lowest and highest, over runs, of each run's median
	// same-round ratio (and the median of those); NaNs with fewer than two
	// runs.
	RunRatio Stat
	Runs     int
	Allocs   float64
	Bytes    float64
	Extra    map[string]Stat
}

// GroupSummary is a group with its rows summarised.
type GroupSummary struct {
	ID, Title, Note string
	Kind            Kind
	NoPlot          bool
	Rows            []RowSummary
}

// Baseline returns the baseline row, if any.
func (g GroupSummary) Baseline() (RowSummary, bool) {
	for _, r := range g.Rows {
		if r.Baseline {
			return r, true
		}
	}
	return RowSummary{}, false
}

// Row returns the row named name.
func (g GroupSummary) Row(name string) (RowSummary, bool) {
	for _, r := range g.Rows {
		if r.Name == name {
			return r, true
		}
	}
	return RowSummary{}, false
}

// headline is the number a group's ratio compares: acquisitions per second
// for Contention, the median per-operation latency for Latency when it was
// measured, and ns/op otherwise.
func headline(k Kind, s Sample) float64 {
	switch k {
	case Contention:
		if v, ok := s.Extra[MetricAcqPerSec]; ok {
			return v
		}
		return math.NaN()
	case Latency:
		if v, ok := s.Extra[MetricP50]; ok {
			return v
		}
	}
	return s.NsPerOp
}

// Summarize computes medians and paired ratios for g.
func Summarize(g Group) GroupSummary {
	out := GroupSummary{ID: g.ID, Title: g.Title, Note: g.Note, Kind: g.Kind, NoPlot: g.NoPlot}
	base := map[int]float64{}
	for _, r := range g.Rows {
		if r.Baseline {
			for _, s := range r.Samples {
				base[s.Round] = headline(g.Kind, s)
			}
		}
	}
	for _, r := range g.Rows {
		rs := RowSummary{Name: r.Name, Baseline: r.Baseline, Rounds: len(r.Samples), Extra: map[string]Stat{}}
		var ns, allocs, bytes, ratios []float64
		extra := map[string][]float64{}
		perRun := map[int][]float64{}
		for _, s := range r.Samples {
			ns = append(ns, s.NsPerOp)
			allocs = append(allocs, s.AllocsPerOp)
			bytes = append(bytes, s.BytesPerOp)
			for k, v := range s.Extra {
				extra[k] = append(extra[k], v)
			}
			if b, ok := base[s.Round]; ok && b != 0 && !math.IsNaN(b) {
				ratios = append(ratios, headline(g.Kind, s)/b)
				perRun[s.Run] = append(perRun[s.Run], headline(g.Kind, s)/b)
			}
		}
		rs.Ns = NewStat(ns)
		rs.Ratio = NewStat(ratios)
		rs.RunRatio = Stat{math.NaN(), math.NaN(), math.NaN()}
		rs.Runs = len(perRun)
		if len(perRun) > 1 {
			var meds []float64
			for _, xs := range perRun {
				meds = append(meds, Median(xs))
			}
			rs.RunRatio = NewStat(meds)
		}
		rs.Allocs = Median(allocs)
		rs.Bytes = Median(bytes)
		for k, v := range extra {
			rs.Extra[k] = NewStat(v)
		}
		out.Rows = append(out.Rows, rs)
	}
	return out
}

// Target is a goal on one row's ratio to its group's baseline, reported
// and never asserted.
type Target struct {
	Name   string  // e.g. "fenced acquire+release ≤ 1.05× redislock"
	Group  string  // group ID
	Row    string  // row name
	Metric string  // "time" (the group's ratio) or "allocs" (allocs/op ratio)
	Limit  float64 // met when the value is at most Limit
}

// TargetResult is a target with what was measured.
type TargetResult struct {
	Target
	Value float64 // the ratio; NaN when the rows were not measured
	// Spread is the lowest and highest value over runs (or repeats); NaNs
	// when there was one.
	Spread Stat
	Met    bool
}

// Evaluate checks every target against the summaries.
func Evaluate(targets []Target, groups []GroupSummary) []TargetResult {
	byID := map[string]GroupSummary{}
	for _, g := range groups {
		byID[g.ID] = g
	}
	var out []TargetResult
	for _, t := range targets {
		res := TargetResult{Target: t, Value: math.NaN(), Spread: Stat{math.NaN(), math.NaN(), math.NaN()}}
		g, ok := byID[t.Group]
		row, ok2 := g.Row(t.Row)
		base, ok3 := g.Baseline()
		if ok && ok2 && ok3 {
			switch t.Metric {
			case "allocs":
				if base.Allocs > 0 {
					res.Value = row.Allocs / base.Allocs
				}
			default:
				res.Value = row.Ratio.Median
				res.Spread = row.RunRatio
			}
			res.Met = !math.IsNaN(res.Value) && res.Value <= t.Limit
		}
		out = append(out, res)
	}
	return out
}
