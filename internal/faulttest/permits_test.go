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
// permit sees a writer newer than its PriorWriter, tokens only go up.
func TestChaosPermits(t *testing.T) {
	for _, b := range backends {
		for _, shape := range []chaos.Shape{chaos.ShapeRW, chaos.ShapeSemaphore} {
			t.Run(b.name+"/"+string(shape), func(t *testing.T) {
				t.Parallel()
				r := b.make(t)
				backend := r.backend
				// As in TestChaos: a run must find no violation, every
				// time; one that exercised too little is run again, up
				// to three in all, each checked in full.
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
					t.Logf("\n%s", out.String())
					if !rep.OK() {
						t.Fatalf("violations: %v", rep.Violations())
					}
					enough := rep.Pauses > 0 && rep.StaleRefused > 0 && rep.Spans >= 10
					if shape == chaos.ShapeRW {
						enough = enough && rep.ReadsLive > 0 && rep.WriteGrants > 0
					}
					if enough {
						break
					}
					if run == 3 {
						t.Fatalf("three runs exercised too little; the last: %d pauses, %d stale writes refused, %d live spans, at most %d live at once, %d live reads",
							rep.Pauses, rep.StaleRefused, rep.Spans, rep.MostLive, rep.ReadsLive)
					}
					t.Logf("run %d exercised too little; running again", run)
				}
				if rep.Delays+rep.Cuts+rep.Drops == 0 {
					t.Fatal("no network fault was injected")
				}
			})
		}
	}
}
