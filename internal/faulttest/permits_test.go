package faulttest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/chaos"
)

// Short chaos runs of the semaphore and the read-write lock on every
// backend (each has them: the driver contract), with pauses past the TTL and
// network faults: no stale write lands, no increment is lost, no permit is
// certainly live beside one its shape forbids, no reader under a live
// permit sees a writer newer than its ReadFence, tokens only go up.
func TestChaosPermits(t *testing.T) {
	for _, b := range backends {
		for _, shape := range []chaos.Shape{chaos.ShapeRW, chaos.ShapeSemaphore} {
			t.Run(b.name+"/"+string(shape), func(t *testing.T) {
				t.Parallel()
				r := b.make(t)
				backend := r.backend
				// As in TestChaos: a run must find no violation, every
				// time. What the runs exercised is counted over all of
				// them: one that exercised too little (a loaded server
				// grants few permits) is followed by another, up to
				// three in all, each checked in full.
				var seen permitExercise
				var rep *chaos.PermitReport
				for run := 1; ; run++ {
					var err error
					rep, err = chaos.RunPermits(context.Background(), chaos.PermitConfig{
						Config: chaos.Config{
							Name: r.name, Backend: backend, Store: r.store,
							// The whole TTL, not TestChaos's half: a permit
							// whose grant took longer than its TTL (a loaded
							// server) is never certainly live, and checks
							// nothing of its shape. Two keys and more pauses
							// than TestChaos: a slow server's few permits
							// must still meet paused holders.
							Workers: 6, Keys: 2, Duration: chaosSeconds, TTL: r.ttl, PauseChance: 0.3,
							Network: r.chaos, FaultEvery: 300 * time.Millisecond,
						},
						Shape: shape, Permits: 2,
					})
					if err != nil {
						t.Fatal(err)
					}
					var out bytes.Buffer
					rep.Print(&out)
					t.Logf("run %d:\n%s", run, out.String())
					if !rep.OK() {
						t.Fatalf("violations: %v", rep.Violations())
					}
					seen.add(rep)
					if seen.enough(shape) {
						break
					}
					if run == 3 {
						t.Fatalf("three runs exercised too little: %+v", seen)
					}
					t.Logf("run %d exercised too little so far (%+v); running again", run, seen)
				}
				if rep.Delays+rep.Cuts+rep.Drops == 0 {
					t.Fatal("no network fault was injected")
				}
			})
		}
	}
}

// permitExercise is what TestChaosPermits's runs of one backend and shape
// exercised, summed over the runs.
type permitExercise struct {
	Pauses, StaleRefused, Spans, ReadsLive, WriteGrants int
}

func (e *permitExercise) add(rep *chaos.PermitReport) {
	e.Pauses += rep.Pauses
	e.StaleRefused += rep.StaleRefused
	e.Spans += rep.Spans
	e.ReadsLive += rep.ReadsLive
	e.WriteGrants += rep.WriteGrants
}

// enough says whether the runs met paused holders, refused a stale write,
// and saw at least ten certainly live permits (for a read-write lock, live
// reads and write grants as well).
func (e *permitExercise) enough(shape chaos.Shape) bool {
	ok := e.Pauses > 0 && e.StaleRefused > 0 && e.Spans >= 10
	if shape == chaos.ShapeRW {
		ok = ok && e.ReadsLive > 0 && e.WriteGrants > 0
	}
	return ok
}
