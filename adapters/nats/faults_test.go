package nats_test

import (
	"context"
	"net"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// dialer makes the NATS client's connections with a fault proxy's dial.
type dialer faultproxy.DialFunc

func (d dialer) Dial(network, addr string) (net.Conn, error) {
	return d(context.Background(), network, addr)
}

// dialJS connects to url making every connection with dial, with nats.go's
// default options otherwise.
func dialJS(t *testing.T, url string, dial faultproxy.DialFunc) jetstream.JetStream {
	t.Helper()
	// The client keeps to the proxied server, ignoring the others a
	// cluster tells it about, so that every fault reaches it.
	_, js := natstest.Connect(t, []string{url}, natsgo.SetCustomDialer(dialer(dial)), natsgo.IgnoreDiscoveredServers())
	return js
}

// TestFaultKits runs every check of both network fault kits with the fault
// proxy between the client and one server, on the shared single node and on
// the shared three-node cluster with an R3 bucket.
//
// A Store write on a key another client wrote last (the kits' newer holder
// writes the key first), and an Acquire of a name the Backend has not seen,
// are two requests: a read of the key on the stream's leader, then the
// conditional publish. JetStream cannot compare a header's value on the server, so a
// fenced write on a key another client wrote cannot be one request. The
// lost-reply checks therefore let the read's reply through and lose the
// publish's (RequestsBeforeWrite, RequestsBeforeAcquire: nats.go sends each
// request in one write and waits for its reply). Release and Extend of a
// lease the Backend took are one request (its lease cache). The driver's
// kit includes the resume, set and permit checks: a resume is a read and
// the publish too, a set is taken name by name (the Backend answers
// driver.ErrNotAtomic), and a permit's Acquire has its read let through as
// well.
func TestFaultKits(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) { runFaultKits(t, top) })
	}
}

func runFaultKits(t *testing.T, top topology) {
	node := top.cluster(t).Nodes[0]
	_, js := natstest.Connect(t, []string{node.URL()})
	bucket := natstest.Bucket(t, js, top.replicas)
	t.Run("Store", func(t *testing.T) {
		newStore := func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
			s, err := fencenats.NewStore(t.Context(), dialJS(t, node.URL(), dial), bucket, &fencenats.StoreOptions{Prefix: "faults_store"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		checks := fencetest.FaultChecks()
		faultkit.RunEach(t, node.Addr(), fencetest.FaultTimeout, names(checks, func(c fencetest.FaultCheck) string { return c.Name }),
			func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) fencetest.FaultEnv {
				return fencetest.FaultEnv{Store: newStore(t, p.Dial), Proxy: p, Other: newStore(t, plain), NS: fencetest.Namespace(), RequestsBeforeWrite: 1}
			},
			func(ctx context.Context, i int, env fencetest.FaultEnv) error { return checks[i].Run(ctx, env) })
	})
	// A permit's Acquire is a read of the name's key on the leader and the
	// conditional publish: the read's reply passes, the publish's is lost.
	// (The clock sample that goes with a read when the Backend's is stale
	// is taken by the kit's warm-up calls, a moment before.)
	t.Run("Backend", func(t *testing.T) {
		newBackend := func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
			b, err := fencenats.NewBackend(t.Context(), dialJS(t, node.URL(), dial), bucket, &fencenats.BackendOptions{Prefix: "faults_lock"})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		drivertest.RunFaults(t, node.Addr(), newBackend, &drivertest.FaultOptions{RequestsBeforeAcquire: 1, RequestsBeforePermit: 1})
	})
}

func names[C any](cs []C, name func(C) string) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = name(c)
	}
	return out
}
