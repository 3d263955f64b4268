package nats_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/chaos"
)

// TestChaosPermits: a short chaos run of the semaphore and the read-write
// lock on the shared single node and on the shared three-node cluster with
// an R3 bucket, with workers paused past their TTL: no stale write lands,
// no increment is lost, no permit is certainly live beside one its shape
// forbids, no reader sees a writer newer than its PriorWriter, tokens only
// go up. The fenced store shares the permits' bucket, as fencelab's does.
func TestChaosPermits(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			_, js := natstest.Connect(t, top.cluster(t).URLs())
			bucket := natstest.Bucket(t, js, top.replicas)
			for _, shape := range []chaos.Shape{chaos.ShapeRW, chaos.ShapeSemaphore} {
				t.Run(string(shape), func(t *testing.T) {
					rep, err := chaos.RunPermits(context.Background(), chaos.PermitConfig{
						Config: chaos.Config{
							Name:    "nats",
							Backend: newBackend(t, js, bucket),
							Store:   newStore(t, js, bucket),
							Workers: 6, Keys: 2, Duration: 5 * time.Second, TTL: time.Second, PauseChance: 0.3,
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
					if rep.Spans == 0 {
						t.Fatal("no permit was certainly live: the run checked nothing")
					}
				})
			}
		})
	}
}
