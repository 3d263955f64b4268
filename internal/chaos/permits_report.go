package chaos

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// PermitReport is what a permit run observed and found: the counter checks
// of Report, and the shape's own.
type PermitReport struct {
	*Report
	Shape      Shape
	Permits    int     // the semaphore's permits
	ReadChance float64 // RW: the share of reading cycles

	SemGrants, ReadGrants, WriteGrants int // permit Acquire calls that returned a permit
	Refusals                           int // permit Acquire calls refused (held, in line)
	Believed                           int // most workers that believed they held a permit on one name at once
	Spans                              int // permits with a time during which they were certainly live
	MostLive                           int // most permits certainly live at once on one name
	// Exclusions counts permits certainly live at the same time as permits
	// the shape forbids beside them: more than Permits, or a writer with
	// anyone (must be 0).
	Exclusions int

	Reads       int // reads under a read permit
	ReadsLive   int // of those, reads whose permit was still live after them
	NewerWriter int // reads after their permit lapsed that saw a fence above ReadFence: what ReadFence lets a reader detect
	// ReadsAbove counts reads under a certainly-live read permit that saw a
	// fence above the permit's ReadFence (must be 0).
	ReadsAbove int

	TokensShared   int // grants of a token another owner was granted (must be 0)
	PriorForgotten int // grants whose PriorWriter misses a writer granted before them (must be 0)

	Inspections       int // Inspect samples taken
	InspectFailures   int // samples that failed (faults)
	InspectViolations int // samples showing more permits than the shape allows (must be 0)

	// ServerForgets: the server may lose its permits (PermitConfig), so
	// Exclusions, InspectViolations, ReadsAbove and PriorForgotten are
	// figures, not violations.
	ServerForgets bool
}

// Violations lists what went wrong, in words: Report's and the shape's.
func (r *PermitReport) Violations() []string {
	v := r.Report.Violations()
	if r.TokensShared > 0 {
		v = append(v, fmt.Sprintf("%d tokens granted to two owners", r.TokensShared))
	}
	if r.ServerForgets {
		return v
	}
	if r.Exclusions > 0 {
		v = append(v, fmt.Sprintf("%d permits certainly live beside permits the %s shape forbids", r.Exclusions, r.Shape))
	}
	if r.ReadsAbove > 0 {
		v = append(v, fmt.Sprintf("%d reads under a live read permit saw a newer writer's fence", r.ReadsAbove))
	}
	if r.PriorForgotten > 0 {
		v = append(v, fmt.Sprintf("%d grants with a prior writer below a writer granted before them", r.PriorForgotten))
	}
	if r.InspectViolations > 0 {
		v = append(v, fmt.Sprintf("%d inspections showed more live permits than the shape allows", r.InspectViolations))
	}
	return v
}

// OK reports whether the run found no violation.
func (r *PermitReport) OK() bool { return len(r.Violations()) == 0 }

// Print writes the report for people.
func (r *PermitReport) Print(w io.Writer) {
	mode := "fenced (Advance, Get, Put with the permit's token)"
	if r.Unfenced {
		mode = "UNFENCED (permits only, plain writes)"
	}
	shape := fmt.Sprintf("semaphore of %d permits", r.Permits)
	if r.Shape == ShapeRW {
		shape = fmt.Sprintf("read-write locks (%.0f%% reading cycles)", 100*r.ReadChance)
	}
	fmt.Fprintf(w, "chaos on %s, %s: %d workers, %d keys, TTL %v, %v (ran %v), seed %d, %s\n",
		r.Name, shape, r.Workers, r.Keys, r.TTL, r.Duration, r.Elapsed.Round(time.Millisecond), r.Seed, mode)
	fmt.Fprintf(w, "faults: %d pauses past the TTL; network: %d delays, %d cuts, %d dropped replies\n",
		r.Pauses, r.Delays, r.Cuts, r.Drops)
	if r.ServerForgets {
		fmt.Fprintln(w, "the server may forget its permits: the rows marked * are figures, not violations")
	}
	mark := func(label string) string {
		if r.ServerForgets {
			return strings.Replace(label, "(must be 0)", "*", 1)
		}
		return label
	}
	row := func(label string, v any) { fmt.Fprintf(w, "  %-48s %v\n", label, v) }
	soft := func(label string, v any) { row(mark(label), v) }
	if r.Shape == ShapeSemaphore {
		row("permits granted", r.SemGrants)
	} else {
		row("permits granted (read, write)", fmt.Sprintf("%d, %d", r.ReadGrants, r.WriteGrants))
	}
	row("acquire attempts refused (held, in line)", r.Refusals)
	if r.AcquireFailures > 0 {
		row("acquire calls that gave up", r.AcquireFailures)
	}
	row("most holders believed at once", r.Believed)
	row("permits certainly live for a while", r.Spans)
	row("most permits certainly live at once", r.MostLive)
	soft("permits live beside forbidden ones (must be 0)", r.Exclusions)
	row("inspections (failed)", fmt.Sprintf("%d (%d)", r.Inspections, r.InspectFailures))
	soft("inspections over the shape (must be 0)", r.InspectViolations)
	row("tokens shared by two owners (must be 0)", r.TokensShared)
	row("token regressions (must be 0)", r.Regressions)
	soft("prior writers forgotten (must be 0)", r.PriorForgotten)
	if r.Shape == ShapeRW {
		row("reads (permit still live after the read)", fmt.Sprintf("%d (%d)", r.Reads, r.ReadsLive))
		row("lapsed reads that saw a newer writer", r.NewerWriter)
		soft("live reads above ReadFence (must be 0)", r.ReadsAbove)
	}
	row("writes (Put calls)", r.Writes)
	row("stale writes refused", r.StaleRefused)
	row("stale writes accepted (must be 0)", r.StaleAccepted)
	row("writes with unknown outcome", fmt.Sprintf("%d (retried with the same token)", r.UnknownWrites))
	row("increments that landed", r.Increments)
	if r.Ambiguous > 0 {
		row("increments with unknown outcome", fmt.Sprintf("%d (%d seen later, counted as landed)", r.Ambiguous, r.AmbiguousLanded))
	}
	row("final counters (sum)", r.Final)
	row("lost increments (must be 0)", r.Lost)
	if r.Extra > 0 {
		row("unexplained increments (must be 0)", r.Extra)
	}
	row("fenced register, porcupine", fmt.Sprintf("%s (%d ops, %d segments)", r.Register, r.Register.Ops, r.Register.Segments))
	if v := r.Violations(); len(v) > 0 {
		fmt.Fprintf(w, "VIOLATIONS: %d\n", len(v))
		for _, s := range v {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		for _, s := range r.Examples {
			fmt.Fprintf(w, "  e.g. %s\n", s)
		}
		if r.Register.Failure != "" {
			fmt.Fprintf(w, "first segment that is not linearizable against the fenced register:\n%s", r.Register.Failure)
		}
		return
	}
	fmt.Fprintln(w, "no violation")
}

// check computes the report: Run's counter checks on the history, then the
// shape's checks on the grants, spans, reads and samples.
func (p *permitRun) check(hist, final []Op) *PermitReport {
	base := p.r.check(hist, final)
	p.mu.Lock()
	defer p.mu.Unlock()
	rep := &PermitReport{
		Report: base, Shape: p.pc.Shape, Permits: p.pc.Permits, ReadChance: max(p.pc.ReadChance, 0),
		SemGrants: p.semGrants, ReadGrants: p.readGrants, WriteGrants: p.writeGrants, Refusals: p.notGranted,
		Believed: p.believedMax, Spans: len(p.spans), Reads: len(p.reads),
		Inspections: p.inspections, InspectFailures: p.inspectFailures, InspectViolations: p.inspectBad,
		ServerForgets: p.pc.ServerForgets,
	}
	base.Overlaps = p.overlaps
	if p.pc.Shape == ShapeSemaphore {
		rep.ReadChance = 0
	}
	example := func(what, s string) {
		if s != "" && len(base.Examples) < 6 {
			base.Examples = append(base.Examples, what+": "+s)
		}
	}
	var ex string
	rep.Exclusions, rep.MostLive, ex = exclusion(p.spans, p.pc.Shape, p.pc.Permits)
	example("exclusion", ex)
	for _, o := range p.reads {
		if o.Live {
			rep.ReadsLive++
		}
	}
	rep.ReadsAbove, rep.NewerWriter, ex = readsAboveWriter(p.reads)
	example("read above its prior writer", ex)
	byName := map[string][]grant{}
	for _, g := range p.grants {
		byName[g.Name] = append(byName[g.Name], g)
	}
	for _, gs := range byName {
		shared, regressions, ex := permitTokens(gs)
		rep.TokensShared += shared
		base.Regressions += regressions
		example("tokens", ex)
		n, ex := priorsForgotten(gs)
		rep.PriorForgotten += n
		example("prior writer", ex)
	}
	example("inspection", p.inspectExample)
	return rep
}
