package chaos

import (
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment variables that TestContentionUnderFaults reads in every
// backend package.
const (
	// ContentionSeedEnv replays one seed instead of the fixed seed and a
	// random one.
	ContentionSeedEnv = "FENCEKIT_CONTENTION_SEED"
	// ContentionFaultsEnv sets how long the faults go on (a Go duration,
	// such as 60s); the short run CI makes is the default.
	ContentionFaultsEnv = "FENCEKIT_CONTENTION_FAULTS"
)

// ContentionFixedSeed is the seed every short run replays besides a random
// one.
const ContentionFixedSeed = 20261207

// shortFaults is how long the faults of CI's short run go on, each seed.
const shortFaults = 5 * time.Second

// RunContentionTest is the body of every backend package's
// TestContentionUnderFaults: a contention run (RunContention) with the fixed
// seed and with a random one, each a subtest named by its seed, or only the
// seed ContentionSeedEnv names. setup returns the backend's configuration:
// its Backend and Store, and the Network and Restart it can fault. A run
// fails on any violation, and when it did not exercise every fault it was
// given; it prints its seed and how to replay it.
func RunContentionTest(t *testing.T, setup func(t *testing.T) ContentionConfig) {
	seeds := []uint64{ContentionFixedSeed, mrand.Uint64N(1<<53) + 1}
	if s := os.Getenv(ContentionSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("%s=%q: want a seed above 0", ContentionSeedEnv, s)
		}
		seeds = []uint64{n}
	}
	faults := shortFaults
	if s := os.Getenv(ContentionFaultsEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a duration above 0", ContentionFaultsEnv, s)
		}
		faults = d
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := setup(t)
			cfg.Seed = seed
			if cfg.Faults == 0 {
				cfg.Faults = faults
			}
			t.Logf("seed %d; replay with %s=%d go test -run '%s'", seed, ContentionSeedEnv, seed, t.Name())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			rep, err := RunContention(ctx, cfg)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			var b strings.Builder
			rep.Print(&b)
			t.Log(b.String())
			for _, v := range rep.Violations() {
				t.Errorf("seed %d: %s", seed, v)
			}
			for _, miss := range rep.unexercised(cfg) {
				t.Errorf("seed %d: the run exercised no %s", seed, miss)
			}
		})
	}
}

// unexercised names the faults the run was given but never made.
func (r *ContentionReport) unexercised(cfg ContentionConfig) []string {
	var miss []string
	pauses, cancels, kills := 0, 0, 0
	for _, rep := range []*Report{r.Lock, r.Semaphore.Report, r.RW.Report} {
		pauses += rep.Pauses
		cancels += rep.Cancels
		kills += rep.Kills
	}
	if cfg.PauseChance >= 0 && pauses == 0 {
		miss = append(miss, "pause")
	}
	if cfg.CancelChance >= 0 && cancels == 0 {
		miss = append(miss, "cancelled wait")
	}
	if cfg.KillChance >= 0 && kills == 0 {
		miss = append(miss, "waiter killed in line")
	}
	if cfg.Network != nil && r.Delays+r.Cuts+r.Drops == 0 {
		miss = append(miss, "network fault")
	}
	if cfg.Restart != nil && r.Restarts == 0 {
		miss = append(miss, "restart")
	}
	if r.Lock.StaleRefused+r.Semaphore.StaleRefused+r.RW.StaleRefused == 0 {
		miss = append(miss, "stale write refused")
	}
	return miss
}

// SoakEnv turns TestSoak on in every backend package: how long the soak
// runs (a Go duration, such as 10m). bench/soak sets it.
const SoakEnv = "FENCEKIT_SOAK"

// Growth allowed between samples before a soak calls it a leak: clients
// start a few goroutines on first use, and the heap of a loaded process
// moves by a few MiB.
const (
	soakGoroutineSlack = 20
	soakHeapSlack      = 32 << 20
)

// RunSoakTest is the body of every backend package's TestSoak: one
// contention run (RunContention) whose faults go on for the duration
// SoakEnv names, with its Probe's samples. Without SoakEnv it skips: a
// soak is long, and CI runs the short contention run instead. Beyond the
// contention checks it fails when anything grew: goroutines or heap from
// before the run to after it (past a small slack), or any figure of the
// Probe (connections, server-side keys or rows) from the warm-up to after
// the run.
func RunSoakTest(t *testing.T, setup func(t *testing.T) ContentionConfig) {
	s := os.Getenv(SoakEnv)
	if s == "" {
		t.Skipf("a soak runs only when %s names its duration (bench/soak sets it)", SoakEnv)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration above 0", SoakEnv, s)
	}
	cfg := setup(t)
	cfg.Faults = d
	if s := os.Getenv(ContentionSeedEnv); s != "" {
		if cfg.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: want a seed above 0", ContentionSeedEnv, s)
		}
	}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	cfg.Faults = max(d-cfg.Quiet, d/2)
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = cfg.Faults / 10
	}
	t.Logf("soak of %s for %v: seed %d; replay with %s=%s %s=%d go test -run '%s'", cfg.Name, d, cfg.Seed, SoakEnv, s, ContentionSeedEnv, cfg.Seed, t.Name())
	rep, err := RunContention(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())
	for _, v := range rep.Violations() {
		t.Errorf("seed %d: %s", cfg.Seed, v)
	}
	for _, g := range rep.Growth() {
		t.Errorf("seed %d: %s", cfg.Seed, g)
	}
}

// Growth lists what grew over the run, in words: a figure (goroutines,
// heap, or one of the Probe's: connections, server-side keys or rows)
// higher after the run than the highest it was in the first third of the
// run, past a small slack for goroutines and heap. The first third, not
// the start: pools fill up to their size under load and keep their
// connections (and a proxy two goroutines for each), and a restart may
// have emptied the server at any one sample.
func (r *ContentionReport) Growth() []string {
	if len(r.Samples) < 3 || r.Samples[0].At != "before" || r.Samples[len(r.Samples)-1].At != "after" {
		return []string{"the run took no samples before, during and after it"}
	}
	last := r.Samples[len(r.Samples)-1]
	early := map[string]int64{}
	for _, s := range r.Samples[1 : len(r.Samples)-1] {
		if s.Elapsed > last.Elapsed/3 && len(early) > 0 {
			break
		}
		for k, v := range s.Figures {
			early[k] = max(early[k], v)
		}
	}
	slack := map[string]int64{"goroutines": soakGoroutineSlack, "heap_bytes": soakHeapSlack}
	var g []string
	for _, k := range slices.Sorted(maps.Keys(last.Figures)) {
		if e, ok := early[k]; ok && last.Figures[k] > e+slack[k] {
			g = append(g, fmt.Sprintf("%s grew from at most %d in the first third of the run to %d after it", k, e, last.Figures[k]))
		}
	}
	return g
}
