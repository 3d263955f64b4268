//go:build !fencekit_broken

package lock

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The broken variants of the client (brokenVariants) are compiled only into
// the build tagged fencekit_broken, so that no program ships them. This
// file, in every other build, runs their test in that build, so that a
// plain go test ./... still shows that the simulation catches each.

// TestBrokenVariantsAreCaught runs TestSimulationCatchesBrokenVariants
// (simvariants_test.go) in the build tagged fencekit_broken, as a go test of
// this package in a subprocess, with -race when this test runs under it,
// and fails when that does.
func TestBrokenVariantsAreCaught(t *testing.T) {
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second)) // room to report
		defer cancel()
	}
	args := []string{"test", "-tags", "fencekit_broken", "-run", "^TestSimulationCatchesBrokenVariants$", "-count=1", "-v"}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, ".") // the test runs in this package's directory
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	// Without the verdict line the subprocess may have run nothing (no
	// file carries the tag), which go test also reports as ok.
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSimulationCatchesBrokenVariants") {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var caught []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "caught at seed") {
			caught = append(caught, strings.TrimSpace(line))
		}
	}
	t.Logf("go %s: passed in %v\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), strings.Join(caught, "\n"))
}

// goCommand is the go command of the toolchain running the tests: the one
// in its GOROOT, else the first on PATH (where go test puts that GOROOT's
// bin first).
func goCommand() string {
	name := "go"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if p := filepath.Join(runtime.GOROOT(), "bin", name); runtime.GOROOT() != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// setSimVariant refuses a -sim.variant in this build, which has no broken
// variants.
func setSimVariant(t *testing.T, name string) func() {
	t.Fatalf("-sim.variant=%s: the broken variants exist only in the build tagged fencekit_broken: go test%s -tags fencekit_broken ./lock -run 'TestSimulation$' -sim.variant=%s ...", name, simRaceFlag(), name)
	return nil
}
