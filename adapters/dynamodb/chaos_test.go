package dynamodb_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/internal/chaos"
	"github.com/fencekit/fencekit/internal/testkit"
)

// chaosRig is a Backend and a Store whose client reaches the server through
// a fault-injecting proxy, with the SDK's default options otherwise.
type chaosRig struct {
	backend *fenceddb.Backend
	store   *fenceddb.Store
	network chaos.Network
}

func newChaosRig(t *testing.T) chaosRig {
	t.Helper()
	srv := server(t)
	p := testkit.NewProxy(t, srv.Addr())
	endpoint := "http://" + p.Addr()
	client := srv.Client(func(o *awsddb.Options) { o.BaseEndpoint = &endpoint })
	prefix := testkit.Namespace(t) + "/"
	b, err := fenceddb.NewBackend(client, testTable, &fenceddb.BackendOptions{Prefix: prefix + "lock/"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := fenceddb.NewStore(client, testTable, &fenceddb.StoreOptions{Prefix: prefix + "store/"})
	if err != nil {
		t.Fatal(err)
	}
	return chaosRig{backend: b, store: s, network: chaos.ProxyNetwork(p)}
}

// TestChaos: short chaos runs of the lock through the proxy (delays, cut
// connections, lost replies) with workers paused past their TTL: no stale
// write lands, no increment is lost, tokens only go up, and both porcupine
// checks pass. What the runs exercised is counted over all of them; one
// that leaves it too little is followed by another, up to three, each
// checked in full.
func TestChaos(t *testing.T) {
	r := newChaosRig(t)
	var acquisitions, pauses, stale int
	for run := 1; ; run++ {
		rep, err := chaos.Run(context.Background(), chaos.Config{
			Name: "dynamodb", Backend: r.backend, Store: r.store,
			Workers: 6, Keys: 3, Duration: 4 * time.Second, TTL: 500 * time.Millisecond, MaxDelay: 150 * time.Millisecond,
			Network: r.network, FaultEvery: 300 * time.Millisecond,
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
		if rep.Delays+rep.Cuts+rep.Drops == 0 {
			t.Fatal("no network fault was injected")
		}
		acquisitions += rep.Acquisitions
		pauses += rep.Pauses
		stale += rep.StaleRefused
		if acquisitions >= 20 && pauses > 0 && stale > 0 {
			return
		}
		if run == 3 {
			t.Fatalf("three runs exercised too little: %d acquisitions, %d pauses, %d stale writes refused in all", acquisitions, pauses, stale)
		}
	}
}

// TestChaosPermits: the same for the semaphore and the read-write lock: no
// permit is certainly live beside one its shape forbids, and no reader
// under a live read permit sees a write newer than its ReadFence. What the
// runs exercised is counted over all of them, up to five.
func TestChaosPermits(t *testing.T) {
	for _, shape := range []chaos.Shape{chaos.ShapeRW, chaos.ShapeSemaphore} {
		t.Run(string(shape), func(t *testing.T) {
			r := newChaosRig(t)
			var spans, pauses, stale int
			for run := 1; ; run++ {
				rep, err := chaos.RunPermits(context.Background(), chaos.PermitConfig{
					Config: chaos.Config{
						Name: "dynamodb", Backend: r.backend, Store: r.store,
						Workers: 6, Keys: 2, Duration: 5 * time.Second, TTL: time.Second, PauseChance: 0.3,
						// Delays of a quarter TTL at most: every lock call is a
						// read and a write, and a cycle makes about eight
						// round trips, so the default (up to two TTLs per
						// round trip) leaves a run almost nothing done.
						MaxDelay: 250 * time.Millisecond,
						Network:  r.network, FaultEvery: 300 * time.Millisecond,
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
				spans += rep.Spans
				pauses += rep.Pauses
				stale += rep.StaleRefused
				if spans >= 10 && pauses > 0 && stale > 0 {
					return
				}
				// A loaded machine grants few permits in a run: up to
				// five runs, each checked in full.
				if run == 5 {
					t.Fatalf("five runs exercised too little: %d live spans, %d pauses, %d stale writes refused in all", spans, pauses, stale)
				}
			}
		})
	}
}
