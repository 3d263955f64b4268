package report

import (
	"fmt"
	"math"
	"strings"
)

// Server time per operation against floors (bench/suite/servercost.go):
// every repeat measures every row once on the same server, and a ratio is
// always taken between rows of the same repeat.

// CostSample is one row's server time in one repeat.
type CostSample struct {
	Job, Name string
	Floor     bool // the job's floor: every row's "× floor" divides by it
	Ref       bool // a reference row (no fence, or a peer library)
	Usec      float64
	Commands  float64
	Err       string
}

// CostRow is a row summarised over the repeats.
type CostRow struct {
	Job, Name  string
	Floor, Ref bool
	Repeats    int
	Usec       Stat
	Commands   float64
	// Ratio is the row's time over its job's floor's, per repeat.
	Ratio Stat
	// Vs is the ratio to each reference row of the job, per repeat, for the
	// rows that are neither floor nor reference.
	Vs  map[string]Stat
	Err string
}

// SummarizeCost pairs the samples of each repeat and summarises them, rows
// in the order of the first repeat.
func SummarizeCost(repeats [][]CostSample) []CostRow {
	var rows []CostRow
	index := map[string]int{}
	key := func(s CostSample) string { return s.Job + "\x00" + s.Name }
	usec := map[string][]float64{}
	ratio := map[string][]float64{}
	vs := map[string]map[string][]float64{}
	for _, rep := range repeats {
		floor := map[string]float64{}
		refs := map[string]map[string]float64{}
		for _, s := range rep {
			if s.Err != "" || math.IsNaN(s.Usec) || s.Usec <= 0 {
				continue
			}
			if s.Floor {
				floor[s.Job] = s.Usec
			}
			if s.Ref {
				if refs[s.Job] == nil {
					refs[s.Job] = map[string]float64{}
				}
				refs[s.Job][s.Name] = s.Usec
			}
		}
		for _, s := range rep {
			k := key(s)
			i, ok := index[k]
			if !ok {
				i = len(rows)
				index[k] = i
				rows = append(rows, CostRow{Job: s.Job, Name: s.Name, Floor: s.Floor, Ref: s.Ref, Commands: s.Commands})
			}
			if s.Err != "" {
				rows[i].Err = s.Err
				continue
			}
			rows[i].Repeats++
			usec[k] = append(usec[k], s.Usec)
			if f, ok := floor[s.Job]; ok {
				ratio[k] = append(ratio[k], s.Usec/f)
			}
			if !s.Floor && !s.Ref {
				for name, r := range refs[s.Job] {
					if vs[k] == nil {
						vs[k] = map[string][]float64{}
					}
					vs[k][name] = append(vs[k][name], s.Usec/r)
				}
			}
		}
	}
	for i := range rows {
		k := key(CostSample{Job: rows[i].Job, Name: rows[i].Name})
		rows[i].Usec = NewStat(usec[k])
		rows[i].Ratio = NewStat(ratio[k])
		if len(vs[k]) > 0 {
			rows[i].Vs = map[string]Stat{}
			for name, xs := range vs[k] {
				rows[i].Vs[name] = NewStat(xs)
			}
		}
	}
	return rows
}

// Row returns the row of job named name.
func costRow(rows []CostRow, job, name string) (CostRow, bool) {
	for _, r := range rows {
		if r.Job == job && r.Name == name {
			return r, true
		}
	}
	return CostRow{}, false
}

// CostTarget is a goal on a row's server time over its job's floor (or,
// with Vs set, over that reference row of the job).
type CostTarget struct {
	Name     string
	Job, Row string
	Vs       string
	Limit    float64
}

// EvaluateCost checks cost targets against the median ratios.
func EvaluateCost(targets []CostTarget, rows []CostRow) []TargetResult {
	var out []TargetResult
	for _, t := range targets {
		res := TargetResult{Target: Target{Name: t.Name, Group: "server-cost", Row: t.Row, Metric: "server time", Limit: t.Limit},
			Value: math.NaN(), Spread: Stat{math.NaN(), math.NaN(), math.NaN()}}
		if r, ok := costRow(rows, t.Job, t.Row); ok && r.Err == "" {
			s, ok := r.Ratio, true
			if t.Vs != "" {
				s, ok = r.Vs[t.Vs]
			}
			if ok {
				res.Value = s.Median
				if r.Repeats > 1 {
					res.Spread = s
				}
			}
		}
		res.Met = !math.IsNaN(res.Value) && res.Value <= t.Limit
		out = append(out, res)
	}
	return out
}

// CostTable renders one table per job: server time per operation, commands
// sent, and the ratios with their range over the repeats.
func CostTable(rows []CostRow) string {
	var b strings.Builder
	var jobs []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Job] {
			seen[r.Job] = true
			jobs = append(jobs, r.Job)
		}
	}
	for _, job := range jobs {
		var refs []string
		for _, r := range rows {
			if r.Job == job && r.Ref {
				refs = append(refs, r.Name)
			}
		}
		fmt.Fprintf(&b, "| %s | server time per op | range | commands | × floor | range |", escapeCell(job))
		for _, ref := range refs {
			fmt.Fprintf(&b, " × %s |", escapeCell(shortName(ref)))
		}
		b.WriteString("\n|---|---:|---:|---:|---:|---:|" + strings.Repeat("---:|", len(refs)) + "\n")
		for _, r := range rows {
			if r.Job != job {
				continue
			}
			name := escapeCell(r.Name)
			if r.Floor {
				name = "**" + name + "**"
			}
			if r.Err != "" {
				fmt.Fprintf(&b, "| %s | error: %s | | | | |%s\n", name, escapeCell(r.Err), strings.Repeat(" |", len(refs)))
				continue
			}
			ratio, rng := FormatRatio(r.Ratio.Median), statRange(r.Ratio, 2)
			if r.Floor {
				rng = "–"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |", name, FormatNs(1e3*r.Usec.Median), usecRange(r.Usec), num(r.Commands), ratio, rng)
			for _, ref := range refs {
				s, ok := r.Vs[ref]
				if !ok {
					b.WriteString(" – |")
					continue
				}
				fmt.Fprintf(&b, " %s (%s) |", FormatRatio(s.Median), statRange(s, 2))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// shortName is a reference row's name up to its first colon or comma.
func shortName(s string) string {
	if i := strings.IndexAny(s, ":,("); i > 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}

// statRange prints min–max with prec decimals; "–" for NaN.
func statRange(s Stat, prec int) string {
	if math.IsNaN(s.Min) {
		return "–"
	}
	return fmt.Sprintf("%.*f–%.*f", prec, s.Min, prec, s.Max)
}

// usecRange prints the min–max of a time in µs.
func usecRange(s Stat) string {
	if math.IsNaN(s.Min) {
		return "–"
	}
	return FormatNs(1e3*s.Min) + "–" + FormatNs(1e3*s.Max)
}
