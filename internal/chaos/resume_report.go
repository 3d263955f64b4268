package chaos

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// ResumeReport is what a resume run (RunResume) observed and found: the
// checks of Report, and the resumes'.
type ResumeReport struct {
	*Report

	Restarts       int // leases dropped by their process and resumed by a new Client
	Resumed        int // Resume calls that returned a lease
	NotHeld        int // Resume calls refused with lock.ErrNotHeld: the lease had lapsed (a pause), maybe taken by another
	ResumeFailures int // Resume calls that failed otherwise (faults)
	// RefusedLive counts refusals that returned less than a TTL after the
	// first process's Acquire call began: the lease, never released, was
	// certainly live (must be 0; a figure when Config.LeasesLost).
	RefusedLive int

	// TokenChanged counts resumed leases whose token is not that of the
	// lease they adopted (must be 0).
	TokenChanged int
	// NotLatest counts resumed leases whose token is not the latest token
	// granted to their owner (must be 0).
	NotLatest int
	// Superseded counts Resume calls that succeeded although another owner
	// had been granted the lock, with a higher token, before the call: the
	// owner no longer held it (must be 0; a figure when Config.LeasesLost).
	Superseded int
}

// Violations lists what went wrong, in words: Report's and the resumes'.
func (r *ResumeReport) Violations() []string {
	v := r.Report.Violations()
	return append(v, r.resumeViolations()...)
}

func (r *ResumeReport) resumeViolations() []string {
	var v []string
	if r.TokenChanged > 0 {
		v = append(v, fmt.Sprintf("%d resumed leases with a token other than the adopted lease's", r.TokenChanged))
	}
	if r.NotLatest > 0 {
		v = append(v, fmt.Sprintf("%d resumed leases with a token other than the latest granted to their owner", r.NotLatest))
	}
	if r.RefusedLive > 0 && !r.LeasesLost {
		v = append(v, fmt.Sprintf("%d resumes refused a lease that was certainly live", r.RefusedLive))
	}
	if r.Superseded > 0 && !r.LeasesLost {
		v = append(v, fmt.Sprintf("%d resumes succeeded after another owner was granted the lock", r.Superseded))
	}
	return v
}

// OK reports whether the run found no violation.
func (r *ResumeReport) OK() bool { return len(r.Violations()) == 0 }

// Print writes the report for people: Run's report, then the resumes'
// figures and the verdict on both.
func (r *ResumeReport) Print(w io.Writer) {
	var base bytes.Buffer
	r.Report.Print(&base)
	text := strings.TrimSuffix(base.String(), "no violation\n")
	fmt.Fprint(w, strings.Replace(text, ", fenced (", ", each lease resumed by a new Client half way, fenced (", 1))
	fmt.Fprintln(w, "resumes (a lease dropped unreleased, adopted by its owner with Client.Resume):")
	row := func(label string, v any) { fmt.Fprintf(w, "  %-42s %v\n", label, v) }
	row("restarts", r.Restarts)
	row("resumed", r.Resumed)
	row("refused, lapsed (ErrNotHeld)", r.NotHeld)
	if r.LeasesLost {
		row("refused a live lease (leases lost)", r.RefusedLive)
	} else {
		row("refused a live lease (must be 0)", r.RefusedLive)
	}
	if r.ResumeFailures > 0 {
		row("failed otherwise (faults)", r.ResumeFailures)
	}
	row("token not the adopted one's (must be 0)", r.TokenChanged)
	row("token not the owner's latest (must be 0)", r.NotLatest)
	if r.LeasesLost {
		row("resumed after a newer grant (leases lost)", r.Superseded)
	} else {
		row("resumed after a newer grant (must be 0)", r.Superseded)
	}
	rv := r.resumeViolations()
	switch {
	case len(rv) > 0:
		fmt.Fprintf(w, "RESUME VIOLATIONS: %d\n", len(rv))
		for _, s := range rv {
			fmt.Fprintf(w, "  - %s\n", s)
		}
		if len(r.Report.Violations()) == 0 { // else the examples are printed above
			for _, s := range r.Examples {
				fmt.Fprintf(w, "  e.g. %s\n", s)
			}
		}
	case r.OK():
		fmt.Fprintln(w, "no violation")
	}
}
