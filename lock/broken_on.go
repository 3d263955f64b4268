//go:build fencekit_broken

package lock

// brokenBuild is true in the build tagged fencekit_broken, the one that
// TestBrokenVariantsAreCaught runs TestSimulationCatchesBrokenVariants in
// (go test -tags fencekit_broken ./lock). Never build a program with the
// tag: its client can be switched into a broken one.
const brokenBuild = true

// broken holds the switches of the broken variants: all false except while
// a test of simvariants_test.go, or a replay with -sim.variant, runs.
var broken brokenVariants
