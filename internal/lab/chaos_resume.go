package lab

import (
	"context"

	"github.com/fencekit/fencekit/internal/chaos"
)

// resumeMode is the run `fencelab chaos -resume` asks runShape for: leases
// dropped half way and resumed by a new client (chaos.RunResume). It is not
// a value of -shape.
const resumeMode = "resume"

// chaosMode is what runShape runs: the -shape, or resumeMode with -resume.
func chaosMode(shape string, resume bool) string {
	if resume {
		return resumeMode
	}
	return shape
}

// resumeConflict says why -resume cannot go with the other flags given, or
// returns "": a resume adopts one lock's lease, so it takes neither sets
// (-sets, -transfer) nor permits (-shape rw|semaphore).
func resumeConflict(resume, sets bool, shape string) string {
	switch {
	case !resume:
		return ""
	case sets:
		return "-resume resumes the lease of one lock per cycle: it cannot be combined with -sets or -transfer"
	case shape != "lock":
		return "-resume resumes the lease of a lock: it cannot be combined with -shape " + shape
	}
	return ""
}

// runResume is the run of -resume.
func runResume(ctx context.Context, cfg chaos.Config) (chaosReport, error) {
	rep, err := chaos.RunResume(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return rep, nil
}
