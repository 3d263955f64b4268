package chaos

import (
	"fmt"
	"io"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is what a run observed and what the checks found.
type Report struct {
	Name     string
	Workers  int
	Keys     int
	TTL      time.Duration
	Duration time.Duration // asked for
	Elapsed  time.Duration // until the last cycle ended
	Seed     uint64
	Unfenced bool
	Sets     bool // each cycle took a set of names with DoMulti
	Transfer bool // each set cycle moved an amount between two names' counters
	// LeasesLost: the lock server could lose live leases (Config.LeasesLost),
	// so DoubleHolders is a figure, not a violation.
	LeasesLost bool

	Pauses          int // workers frozen past their TTL
	Delays          int // network delays injected
	Cuts            int // connection cuts injected
	Drops           int // replies dropped after the server executed the request
	Cancels         int // waits the caller gave up (Config.CancelChance)
	Kills           int // waiters killed in line (Config.KillChance)
	Acquisitions    int // leases acquired (lock.Client.Acquire calls that returned one); with Sets, sets acquired (DoMulti calls that ran their function)
	AcquireFailures int // Acquire calls that gave up (not counting the end of the run)
	Overlaps        int // a worker acquired a lock while another still believed it held it

	Writes          int // Put calls that returned a definite answer or gave up, retries included
	Increments      int // distinct increments that landed (acknowledged, or ambiguous and seen later)
	StaleRefused    int // Put and Advance calls refused as stale
	StaleAccepted   int // Put and Advance calls accepted after a newer holder's write had returned
	UnknownWrites   int // Put and Advance calls whose outcome the worker did not learn (then retried)
	Ambiguous       int // increments whose outcome stayed unknown
	AmbiguousLanded int // of those, the ones a later read saw
	Final           int64
	Lost            int64 // increments that landed but are missing from the final counters
	Extra           int64 // counter steps that no landed increment explains (counted apart from Lost: one of each does not cancel out)
	Regressions     int   // acquisitions whose token was not above an earlier one's
	Torn            int   // Transfer: transfers of which exactly one half landed
	TornNet         int64 // Transfer: what those halves added up to; the sum of the counters must equal it
	DoubleHolders   int   // acquisitions that certainly held a name while another owner certainly held it too (liveHolders)

	FewestPerWorker int           // leases (or sets) handed to the least served worker
	Starved         int           // workers handed none
	LongestStall    time.Duration // longest time in which no worker was handed any
	StallAt         time.Duration // when that stall began, from the start of the run
	FinalStall      time.Duration // from the last one handed out to the end of the run
	StallLimit      time.Duration // the final stall above which a set run fails (Config.StallLimit)

	Register Verdict // the fenced-register model, per key
	Tokens   Verdict // token monotonicity, per lock

	// Service is, in a contention run, how long the workers waited once
	// the faults had cleared; nil otherwise.
	Service *Service

	// Examples of violations, for the message.
	Examples []string
}

// OK reports whether the run found no violation and both checks decided.
func (r *Report) OK() bool { return len(r.Violations()) == 0 }

// Violations lists what went wrong, in words.
func (r *Report) Violations() []string {
	var v []string
	if r.StaleAccepted > 0 {
		v = append(v, fmt.Sprintf("%d stale writes accepted", r.StaleAccepted))
	}
	if r.Lost > 0 {
		v = append(v, fmt.Sprintf("%d increments lost", r.Lost))
	}
	if r.Extra > 0 {
		v = append(v, fmt.Sprintf("%d counter steps without an increment", r.Extra))
	}
	if r.Regressions > 0 {
		v = append(v, fmt.Sprintf("%d token regressions", r.Regressions))
	}
	if r.Transfer && r.Final != r.TornNet {
		v = append(v, fmt.Sprintf("sum of the counters %d is not the net %d of the torn transfers", r.Final, r.TornNet))
	}
	if r.DoubleHolders > 0 && !r.LeasesLost {
		v = append(v, fmt.Sprintf("%d acquisitions while another owner's lease on the name was live", r.DoubleHolders))
	}
	v = append(v, r.progressViolations()...)
	if r.Service != nil {
		v = append(v, r.Service.violations()...)
	}
	if r.Register.Result != porcupine.Ok {
		v = append(v, "fenced-register check: "+r.Register.String())
	}
	if r.Tokens.Result != porcupine.Ok {
		v = append(v, "token-monotonicity check: "+r.Tokens.String())
	}
	return v
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	mode := "fenced (Advance, Get, Put with the lease's token)"
	if r.Unfenced {
		mode = "UNFENCED (lock only, plain writes)"
	}
	switch {
	case r.Transfer:
		mode = "transfers under sets of 2-3 names with DoMulti, " + mode
	case r.Sets:
		mode = "sets of 2-3 names with DoMulti, " + mode
	}
	fmt.Fprintf(w, "chaos on %s: %d workers, %d keys, TTL %v, %v (ran %v), seed %d, %s\n",
		r.Name, r.Workers, r.Keys, r.TTL, r.Duration, r.Elapsed.Round(time.Millisecond), r.Seed, mode)
	fmt.Fprintf(w, "faults: %d pauses past the TTL; network: %d delays, %d cuts, %d dropped replies\n",
		r.Pauses, r.Delays, r.Cuts, r.Drops)
	row := func(label string, v any) { fmt.Fprintf(w, "  %-34s %v\n", label, v) }
	if r.Sets {
		row("sets acquired", r.Acquisitions)
	} else {
		row("acquisitions", r.Acquisitions)
	}
	if r.AcquireFailures > 0 {
		row("acquire calls that gave up", r.AcquireFailures)
	}
	row("lease overlaps observed", r.Overlaps)
	row("writes (Put calls)", r.Writes)
	row("stale writes refused", r.StaleRefused)
	row("stale writes accepted (must be 0)", r.StaleAccepted)
	row("writes with unknown outcome", fmt.Sprintf("%d (retried with the same token)", r.UnknownWrites))
	if r.Transfer {
		row("writes that landed", r.Increments)
	} else {
		row("increments that landed", r.Increments)
	}
	if r.Ambiguous > 0 {
		row("increments with unknown outcome", fmt.Sprintf("%d (%d seen later, counted as landed)", r.Ambiguous, r.AmbiguousLanded))
	}
	row("final counters (sum)", r.Final)
	if r.Transfer {
		row("lost updates (must be 0)", r.Lost)
	} else {
		row("lost increments (must be 0)", r.Lost)
	}
	if r.Transfer {
		row("transfers torn (one half landed)", fmt.Sprintf("%d, net %+d", r.Torn, r.TornNet))
	}
	if r.Extra > 0 {
		row("unexplained increments (must be 0)", r.Extra)
	}
	row("token regressions (must be 0)", r.Regressions)
	if r.LeasesLost {
		row("two live holders (leases lost)", r.DoubleHolders)
	} else {
		row("two live holders (must be 0)", r.DoubleHolders)
	}
	row("longest time without acquisition", fmt.Sprintf("%v (from %v)", r.LongestStall.Round(time.Millisecond), r.StallAt.Round(time.Millisecond)))
	if r.Sets {
		row("none in the last (no deadlock)", fmt.Sprintf("%v (limit %v)", r.FinalStall.Round(time.Millisecond), r.StallLimit))
	}
	row("fewest acquisitions of a worker", r.FewestPerWorker)
	row("fenced register, porcupine", fmt.Sprintf("%s (%d ops, %d segments)", r.Register, r.Register.Ops, r.Register.Segments))
	row("token monotonicity, porcupine", fmt.Sprintf("%s (%d acquisitions, %d segments)", r.Tokens, r.Tokens.Ops, r.Tokens.Segments))
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
		if r.Tokens.Failure != "" {
			fmt.Fprintf(w, "first segment that is not linearizable against token monotonicity:\n%s", r.Tokens.Failure)
		}
		return
	}
	fmt.Fprintln(w, "no violation")
}

// check computes the report from the history; final holds the last read of
// every key.
func (r *runner) check(hist []Op, final []Op) *Report {
	cfg := &r.cfg
	r.mu.Lock()
	rep := &Report{
		Name: cfg.Name, Workers: cfg.Workers, Keys: cfg.Keys, TTL: cfg.TTL, Duration: cfg.Duration,
		Seed: cfg.Seed, Unfenced: cfg.Unfenced, Sets: cfg.Sets, Transfer: cfg.Transfer, LeasesLost: cfg.LeasesLost,
		Pauses: r.pauses, Delays: r.delays, Cuts: r.cuts, Drops: r.drops, Cancels: r.cancels, Kills: r.kills,
		Acquisitions: r.acquisitions, AcquireFailures: r.acquireFailures, Overlaps: r.overlaps,
	}
	r.mu.Unlock()
	if rep.Name == "" {
		rep.Name = "?"
	}

	// Direct counts.
	seen := map[int64]bool{} // write ids some read returned
	acked := map[int64]bool{}
	unknown := map[int64]bool{}
	for _, o := range hist {
		switch {
		case o.Kind == Get && o.ID != 0:
			seen[o.ID] = true
		case (o.Kind == Put || o.Kind == Advance) && o.Outcome == Stale:
			rep.StaleRefused++
		case (o.Kind == Put || o.Kind == Advance) && o.Outcome == Unknown:
			rep.UnknownWrites++
		}
		if o.Kind == Put {
			rep.Writes++
			switch o.Outcome {
			case OK:
				acked[o.ID] = true
			case Unknown:
				unknown[o.ID] = true
			}
		}
	}
	for id := range unknown {
		if acked[id] {
			continue // a retry was acknowledged: one increment, counted there
		}
		rep.Ambiguous++
		if seen[id] {
			rep.AmbiguousLanded++
		}
	}
	rep.Increments = len(acked) + rep.AmbiguousLanded
	for _, o := range final {
		rep.Final += o.Value
	}
	landed := map[int64]bool{}
	for id := range acked {
		landed[id] = true
	}
	for id := range unknown {
		if seen[id] {
			landed[id] = true
		}
	}
	if cfg.Transfer {
		rep.Lost, rep.Extra, rep.Torn, rep.TornNet = chains(hist, final, landed)
	} else {
		rep.Lost, rep.Extra = lostAndExtra(hist, final, landed)
	}

	writes := byKind(hist, cfg.Keys, Put, Advance)
	for _, ops := range writes {
		n, ex := staleAccepted(ops)
		rep.StaleAccepted += n
		if ex != "" && len(rep.Examples) < 3 {
			rep.Examples = append(rep.Examples, "stale write accepted: "+ex)
		}
	}
	for _, ops := range byKind(hist, cfg.Keys, Acquire, Release) {
		n, ex := liveHolders(ops, cfg.TTL, cfg.ambiguity())
		rep.DoubleHolders += n
		if ex != "" && len(rep.Examples) < 3 {
			rep.Examples = append(rep.Examples, "two live holders: "+ex)
		}
	}
	acquires := byKind(hist, cfg.Keys, Acquire)
	for _, ops := range acquires {
		n, ex := tokenRegressions(ops)
		rep.Regressions += n
		if ex != "" && len(rep.Examples) < 3 {
			rep.Examples = append(rep.Examples, "token regression: "+ex)
		}
	}

	// Porcupine.
	rep.Register = checkRegister(byKind(hist, cfg.Keys, Advance, Get, Put), cfg.CheckTimeout)
	rep.Tokens = checkTokens(acquires, cfg.CheckTimeout)
	return rep
}

// lostAndExtra counts, per key, the increments that landed but are missing
// from the final counter, and the counter steps no landed increment
// explains. Each increment writes the value it read plus one, so the
// increments that landed on a key must be exactly one for each value from 1
// to its final counter: a value written twice (or above the final counter)
// is an increment lost, a value in that range that no increment wrote is an
// extra step. Counting the two apart keeps one lost increment and one extra
// step from cancelling out.
func lostAndExtra(hist, final []Op, landed map[int64]bool) (lost, extra int64) {
	counts := map[int]map[int64]int64{} // key -> value written -> landed increments
	for _, o := range hist {
		if o.Kind != Put || !landed[o.ID] {
			continue
		}
		if counts[o.Key] == nil {
			counts[o.Key] = map[int64]int64{}
		}
		counts[o.Key][o.Value]++
		delete(landed, o.ID) // retries of one increment count once
	}
	for _, f := range final {
		c := counts[f.Key]
		for v := int64(1); v <= f.Value; v++ {
			if c[v] == 0 {
				extra++
			}
		}
		for v, n := range c {
			switch {
			case v < 1 || v > f.Value:
				lost += n
			case n > 1:
				lost += n - 1
			}
		}
	}
	return lost, extra
}
