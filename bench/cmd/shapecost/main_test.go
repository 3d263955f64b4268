package main

import (
	"slices"
	"testing"

	"github.com/fencekit/fencekit/bench/suite"
)

// Every shape compared with a baseline, and every baseline, is an
// operation the shape cases report, so the ratio column is never empty by
// a typo.
func TestBaselinesAreShapeOperations(t *testing.T) {
	for op, base := range baselineOf {
		if !slices.Contains(suite.ShapeOps, op) || !slices.Contains(suite.ShapeOps, base[0]) {
			t.Errorf("baselineOf[%q] = %q: not among suite.ShapeOps %q", op, base, suite.ShapeOps)
		}
		if !isBaseline(base[0], base[1]) || isBaseline(op, "fencekit Client.Resume") {
			t.Errorf("isBaseline wrong for %q", base)
		}
	}
}
