package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
)

// stickyPlaces is the memory backend keeping every place in line for an
// hour whatever the Client asks: a waiter killed in line then holds up the
// ones behind it long after its place TTL, as a backend that never expired
// places would.
type stickyPlaces struct{ *memory.Backend }

func (b stickyPlaces) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Place > 0 {
		req.Place = time.Hour
	}
	return b.Backend.Acquire(ctx, req)
}

// The contention run finds a backend whose dead waiters' places never
// expire: waits after the faults cleared run past the service bound, and
// places are left in line after the run. The same run on the memory
// backend as it is finds nothing.
func TestContentionCatchesPlacesThatNeverExpire(t *testing.T) {
	run := func(b driver.Backend) *ContentionReport {
		t.Helper()
		rep, err := RunContention(context.Background(), ContentionConfig{
			Backend: b, Store: memory.NewStore(), Name: "memory",
			Workers: 6, SemaphoreWorkers: 3, Permits: 2, RWWorkers: 3,
			Faults: 2 * time.Second, TTL: 200 * time.Millisecond, PlaceTTL: 200 * time.Millisecond,
			KillChance: 0.3, Seed: 7,
		})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if v := run(memory.NewBackend()).Violations(); len(v) > 0 {
		t.Fatalf("memory backend: %v", v)
	}
	rep := run(stickyPlaces{memory.NewBackend()})
	v := rep.Violations()
	var b strings.Builder
	rep.Print(&b)
	if rep.LeftWaiting == 0 || !slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, "places and") }) {
		t.Errorf("places left in line not reported; violations %q\n%s", v, b.String())
	}
	if !slices.ContainsFunc(v, func(s string) bool {
		return strings.Contains(s, "longer than the bound") || strings.Contains(s, "served nothing")
	}) {
		t.Errorf("waits past the bound not reported; violations %q\n%s", v, b.String())
	}
}

// The samples are taken before the run, after its warm-up and after it,
// each with the goroutines, the heap and what the Probe reports; a Probe
// figure higher after the run than early in it is growth.
func TestContentionSamples(t *testing.T) {
	probes := 0
	rep, err := RunContention(context.Background(), ContentionConfig{
		Backend: memory.NewBackend(), Store: memory.NewStore(), Name: "memory",
		Workers: 2, SemaphoreWorkers: 2, RWWorkers: 2, Faults: time.Second, Quiet: 2 * time.Second,
		TTL: 100 * time.Millisecond, PlaceTTL: 100 * time.Millisecond, Seed: 1,
		Probe: func(context.Context) (map[string]int64, error) {
			probes++
			return map[string]int64{"conns": int64(probes)}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var at []string
	for i, s := range rep.Samples {
		at = append(at, strings.SplitN(s.At, "=", 2)[0])
		if s.Figures["goroutines"] <= 0 || s.Figures["heap_bytes"] <= 0 || s.Figures["conns"] != int64(i+1) {
			t.Errorf("sample %s: %v", s.At, s.Figures)
		}
	}
	if !slices.Equal(at, []string{"before", "t", "after"}) {
		t.Errorf("samples at %v, want before, t=..., after", at)
	}
	if g := rep.Growth(); len(g) != 1 || !strings.Contains(g[0], "conns grew from at most 2") {
		t.Errorf("growth %q, want conns grown from 2 to 3", g)
	}
}
