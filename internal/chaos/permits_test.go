package chaos

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// runPermits runs a short permit run and returns its report and printout.
func runPermits(t *testing.T, pc PermitConfig) (*PermitReport, string) {
	t.Helper()
	if pc.Name == "" {
		pc.Name = "memory"
	}
	if pc.Workers == 0 {
		pc.Workers = 6
	}
	if pc.Keys == 0 {
		pc.Keys = 2
	}
	if pc.Duration == 0 {
		pc.Duration = time.Second
	}
	if pc.TTL == 0 {
		pc.TTL = 30 * time.Millisecond
	}
	rep, err := RunPermits(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	t.Logf("\n%s", out.String())
	return rep, out.String()
}

func TestRunPermitsRWOnMemory(t *testing.T) {
	t.Parallel()
	rep, out := runPermits(t, PermitConfig{
		Config: Config{Backend: memory.NewBackend(), Store: memory.NewStore(), Seed: 11},
		Shape:  ShapeRW,
	})
	if !rep.OK() || !strings.Contains(out, "no violation") {
		t.Fatalf("violations on a fenced run: %v", rep.Violations())
	}
	if rep.ReadGrants == 0 || rep.WriteGrants == 0 || rep.ReadsLive == 0 || rep.Pauses == 0 ||
		rep.StaleRefused == 0 || rep.Increments == 0 || rep.Spans == 0 || rep.Inspections == 0 {
		t.Fatal("the run exercised too little")
	}
	if rep.Final != int64(rep.Increments) {
		t.Fatalf("final %d, increments %d", rep.Final, rep.Increments)
	}
}

func TestRunPermitsSemaphoreOnMemory(t *testing.T) {
	t.Parallel()
	rep, out := runPermits(t, PermitConfig{
		Config:  Config{Backend: memory.NewBackend(), Store: memory.NewStore(), Keys: 3, Seed: 12},
		Shape:   ShapeSemaphore,
		Permits: 2,
	})
	if !rep.OK() || !strings.Contains(out, "no violation") {
		t.Fatalf("violations on a fenced run: %v", rep.Violations())
	}
	if rep.SemGrants == 0 || rep.Pauses == 0 || rep.StaleRefused == 0 || rep.Increments == 0 {
		t.Fatal("the run exercised too little")
	}
	// Two permits were held together at some point, and never three.
	if rep.MostLive != 2 {
		t.Fatalf("most permits certainly live at once: %d, want 2", rep.MostLive)
	}
	if rep.Final != int64(rep.Increments) {
		t.Fatalf("final %d, increments %d", rep.Final, rep.Increments)
	}
}

// noPermits is a backend without permits: it answers every permit
// request with driver.ErrUnsupported, having changed nothing.
type noPermits struct{ driver.Backend }

func (b noPermits) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind.Permit() {
		return driver.Grant{}, driver.ErrUnsupported
	}
	return b.Backend.Acquire(ctx, req)
}

func TestRunPermitsRefusesBadConfig(t *testing.T) {
	_, err := RunPermits(context.Background(), PermitConfig{
		Config: Config{Backend: noPermits{memory.NewBackend()}, Store: memory.NewStore()}, Shape: ShapeRW,
	})
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("a backend without permits: %v, want ErrUnsupported", err)
	}
	for _, pc := range []PermitConfig{
		{Shape: "triangle"},
		{Shape: ShapeSemaphore, Permits: -1},
		{Shape: ShapeSemaphore, Permits: driver.MaxPermits + 1},
	} {
		pc.Backend, pc.Store = memory.NewBackend(), memory.NewStore()
		if _, err := RunPermits(context.Background(), pc); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("shape %q, %d permits: %v, want ErrInvalid", pc.Shape, pc.Permits, err)
		}
	}
}

// extraPermit is a backend with a bug: its semaphores grant one permit
// more than asked for.
type extraPermit struct{ *memory.Backend }

func (b extraPermit) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind == driver.Semaphore {
		req.Limit++
	}
	return b.Backend.Acquire(ctx, req)
}

// sharingWriter is a backend with a bug: its writers share the lock with
// readers (and with each other), as readers do.
type sharingWriter struct{ *memory.Backend }

func (b sharingWriter) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind == driver.Write {
		req.Kind = driver.Read
	}
	return b.Backend.Acquire(ctx, req)
}

// forgetfulPrior is a backend with a bug: it never tells a permit about
// the writers before it.
type forgetfulPrior struct{ *memory.Backend }

func (b forgetfulPrior) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	g, err := b.Backend.Acquire(ctx, req)
	g.PriorWriter = 0
	return g, err
}

// Fenced runs over broken permit backends fail the shape's checks: the
// checker catches adapters that break the shape, not only lost writes.
func TestRunPermitsCatchesBrokenBackends(t *testing.T) {
	t.Run("semaphore with a permit too many", func(t *testing.T) {
		t.Parallel()
		rep, _ := runPermits(t, PermitConfig{
			Config: Config{Backend: extraPermit{memory.NewBackend()}, Store: memory.NewStore(), Keys: 3, Seed: 13},
			Shape:  ShapeSemaphore, Permits: 2,
		})
		if rep.OK() || rep.Exclusions == 0 || rep.InspectViolations == 0 || rep.MostLive != 3 {
			t.Fatalf("a third permit passed: %d exclusions, %d inspections over the shape, most live %d",
				rep.Exclusions, rep.InspectViolations, rep.MostLive)
		}
	})
	t.Run("writer sharing with readers", func(t *testing.T) {
		t.Parallel()
		rep, _ := runPermits(t, PermitConfig{
			Config: Config{Backend: sharingWriter{memory.NewBackend()}, Store: memory.NewStore(), Seed: 14},
			Shape:  ShapeRW,
		})
		if rep.OK() || rep.ReadsAbove == 0 || rep.Exclusions == 0 || rep.InspectViolations != 0 {
			// The backend reports its writers as readers, so sampling
			// cannot see them: the history must.
			t.Fatalf("a shared writer passed: %d live reads above their prior writer, %d exclusions, %d inspections over the shape",
				rep.ReadsAbove, rep.Exclusions, rep.InspectViolations)
		}
	})
	t.Run("forgotten prior writer", func(t *testing.T) {
		t.Parallel()
		rep, _ := runPermits(t, PermitConfig{
			Config: Config{Backend: forgetfulPrior{memory.NewBackend()}, Store: memory.NewStore(), Seed: 15},
			Shape:  ShapeRW,
		})
		if rep.OK() || rep.PriorForgotten == 0 || rep.ReadsAbove == 0 || rep.Exclusions != 0 {
			t.Fatalf("a forgotten prior writer passed: %d grants, %d live reads above it, %d exclusions",
				rep.PriorForgotten, rep.ReadsAbove, rep.Exclusions)
		}
	})
}

// A store that ignores tokens loses increments under either shape: the
// counter checks catch it as they do for the lock.
func TestRunPermitsCatchesAStoreThatIgnoresTokens(t *testing.T) {
	for _, shape := range []Shape{ShapeSemaphore, ShapeRW} {
		t.Run(string(shape), func(t *testing.T) {
			t.Parallel()
			testkit.SomeSeedShows(t, 3, "a store that ignores tokens must lose increments", func(seed uint64) (bool, string) {
				rep, out := runPermits(t, PermitConfig{
					Config: Config{Backend: memory.NewBackend(), Store: brokenStore{memory.NewStore()}, Keys: 1, Seed: seed},
					Shape:  shape, Permits: 2,
				})
				return !rep.OK() && rep.Lost > 0 && rep.StaleAccepted > 0 && rep.Register.Result == porcupine.Illegal, out
			})
		})
	}
}

func TestExclusionCounts(t *testing.T) {
	span := func(kind driver.Kind, token, start, end int64) liveSpan {
		return liveSpan{Name: "n", Kind: kind, Token: token, Start: start, End: end, live: true}
	}
	sem := []liveSpan{
		span(driver.Semaphore, 1, 0, 10),
		span(driver.Semaphore, 2, 5, 20),
		span(driver.Semaphore, 3, 10, 30), // starts as 1 ends: not an overlap
		span(driver.Semaphore, 4, 25, 40), // 2 has ended, 3 is live: fine
	}
	if n, most, _ := exclusion(sem, ShapeSemaphore, 2); n != 0 || most != 2 {
		t.Fatalf("two at a time: %d exclusions, most %d; want 0 and 2", n, most)
	}
	sem = append(sem, span(driver.Semaphore, 5, 26, 27)) // a third with 3 and 4
	if n, most, ex := exclusion(sem, ShapeSemaphore, 2); n != 1 || most != 3 || ex == "" {
		t.Fatalf("three at a time: %d exclusions, most %d (%q); want 1 and 3", n, most, ex)
	}
	rw := []liveSpan{
		span(driver.Read, 1, 0, 10),
		span(driver.Read, 2, 5, 20),
		span(driver.Write, 3, 21, 30),
		span(driver.Read, 4, 31, 40),
	}
	if n, _, _ := exclusion(rw, ShapeRW, 0); n != 0 {
		t.Fatalf("readers, then a writer, then a reader: %d exclusions", n)
	}
	if n, _, _ := exclusion(append(rw, span(driver.Write, 5, 35, 50)), ShapeRW, 0); n != 1 {
		t.Fatalf("a writer during a reader: %d exclusions, want 1", n)
	}
	if n, _, _ := exclusion(append(rw, span(driver.Read, 5, 25, 26)), ShapeRW, 0); n != 1 {
		t.Fatalf("a reader during a writer: %d exclusions, want 1", n)
	}
}

func TestReadsAboveWriter(t *testing.T) {
	reads := []readObs{
		{ReadFence: 5, Fence: 5, Live: true}, // the fence the reader raised
		{ReadFence: 5, Fence: 4, Live: true},
		{ReadFence: 5, Fence: 7, Live: false}, // lapsed: a newer writer, detected
		{ReadFence: 5, Fence: 6, Live: true},  // live: impossible
	}
	if n, lapsed, ex := readsAboveWriter(reads); n != 1 || lapsed != 1 || ex == "" {
		t.Fatalf("%d live reads above, %d lapsed; want 1 and 1", n, lapsed)
	}
}

func TestPermitTokenChecks(t *testing.T) {
	g := func(owner string, kind driver.Kind, token, prior, call, ret int64) grant {
		return grant{Name: "n", Owner: owner, Kind: kind, Token: token, Prior: prior, Call: call, Return: ret}
	}
	good := []grant{
		g("a", driver.Write, 1, 0, 0, 10),
		g("b", driver.Read, 3, 1, 20, 30),
		g("c", driver.Read, 2, 1, 15, 40), // concurrent with b
		g("b", driver.Read, 3, 1, 50, 60), // b's retry gets its token back
		g("d", driver.Write, 4, 1, 70, 80),
		g("e", driver.Read, 5, 4, 90, 100),
		g("d", driver.Write, 4, 1, 95, 105), // d's retry: its own permit, its own prior
	}
	if shared, reg, ex := permitTokens(good); shared != 0 || reg != 0 {
		t.Fatalf("good tokens: %d shared, %d regressions (%s)", shared, reg, ex)
	}
	if n, ex := priorsForgotten(good); n != 0 {
		t.Fatalf("good priors: %d forgotten (%s)", n, ex)
	}
	bad := append(good, g("f", driver.Read, 5, 4, 110, 120), g("h", driver.Read, 2, 4, 130, 140))
	// f takes e's token 5; h takes c's token 2, below the tokens before it.
	if shared, reg, _ := permitTokens(bad); shared != 2 || reg != 2 {
		t.Fatalf("tokens taken again: %d shared, %d regressions; want 2 and 2", shared, reg)
	}
	bad = append(good, g("f", driver.Read, 6, 1, 110, 120), g("h", driver.Write, 7, 7, 130, 140))
	if n, _ := priorsForgotten(bad); n != 2 {
		t.Fatalf("a prior below the last writer, and one at its own token: %d, want 2", n)
	}
}

// A server that may forget its permits (killed, restarted empty) makes the
// shape's checks figures: a broken-looking history is then no violation,
// but the counter checks still are.
func TestPermitReportWhenTheServerForgets(t *testing.T) {
	rep := &PermitReport{Report: &Report{Register: Verdict{Result: porcupine.Ok}, Tokens: Verdict{Result: porcupine.Ok}}, Shape: ShapeRW, Exclusions: 2, ReadsAbove: 1, PriorForgotten: 1, InspectViolations: 1}
	if len(rep.Violations()) != 4 {
		t.Fatalf("violations %v, want 4", rep.Violations())
	}
	rep.ServerForgets = true
	if !rep.OK() {
		t.Fatalf("violations %v, want none when the server forgets", rep.Violations())
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !strings.Contains(out.String(), "permits live beside forbidden ones *") || !strings.Contains(out.String(), "lost increments (must be 0)") {
		t.Fatalf("report:\n%s", out.String())
	}
	rep.Lost, rep.TokensShared = 1, 1
	if len(rep.Violations()) != 2 {
		t.Fatalf("violations %v, want the lost increment and the shared token", rep.Violations())
	}
}
