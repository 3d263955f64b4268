package lab

import (
	"context"
	"fmt"
	"io"

	"github.com/fencekit/fencekit/internal/chaos"
)

// chaosShapes are the values of `fencelab chaos -shape`: the lock (chaos.Run)
// or a permit shape (chaos.RunPermits).
var chaosShapes = map[string]bool{"lock": true, string(chaos.ShapeRW): true, string(chaos.ShapeSemaphore): true}

// chaosReport is what the runs of every shape return.
type chaosReport interface {
	Print(w io.Writer)
	OK() bool
}

// runShape runs the chaos run of shape on cfg: chaos.Run for "lock",
// chaos.RunResume for resumeMode (-resume), chaos.RunPermits with permits
// (a semaphore's number) for the others. A backend that answers
// lock.ErrUnsupported for the shape ends the run with that error.
// serverForgets says that the run kills a server whose restart loses every
// permit (Redis without persistence), so the shape's checks are then
// figures (chaos.PermitConfig.ServerForgets).
func runShape(ctx context.Context, shape string, permits int, serverForgets bool, cfg chaos.Config) (chaosReport, error) {
	if shape == resumeMode {
		return runResume(ctx, cfg)
	}
	if shape == "lock" {
		rep, err := chaos.Run(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return rep, nil
	}
	if permits < 1 {
		return nil, fmt.Errorf("-permits %d: a semaphore has at least one permit", permits)
	}
	rep, err := chaos.RunPermits(ctx, chaos.PermitConfig{Config: cfg, Shape: chaos.Shape(shape), Permits: permits, ServerForgets: serverForgets})
	if err != nil {
		return nil, err
	}
	return rep, nil
}
