package etcd_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/chaos"
)

// TestChaosPermits: a short chaos run of the semaphore and the read-write
// lock on the shared cluster, with workers paused past their TTL: no stale
// write lands, no increment is lost, no permit is certainly live beside one
// its shape forbids, no reader sees a writer newer than its PriorWriter,
// tokens only go up. TTLs are etcd's minimum lease, 2 s.
func TestChaosPermits(t *testing.T) {
	cl := sharedClient(t)
	for _, shape := range []chaos.Shape{chaos.ShapeRW, chaos.ShapeSemaphore} {
		t.Run(string(shape), func(t *testing.T) {
			ns := prefix(t)
			rep, err := chaos.RunPermits(context.Background(), chaos.PermitConfig{
				Config: chaos.Config{
					Name:    "etcd",
					Backend: fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns}),
					Store:   fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns}),
					Workers: 6, Keys: 2, Duration: 6 * time.Second, TTL: 2 * time.Second, PauseChance: 0.3,
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
}
