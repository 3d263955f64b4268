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
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
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

// TestFaultKits runs the network fault kits with the fault proxy between
// the client and one server, on the shared single node and on the shared
// three-node cluster with an R3 bucket: the checks that fit a Store and a
// Backend whose writes are a read followed by a conditional write (see
// faultChecks).
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
		checks := faultChecks(fencetest.FaultChecks(), func(c fencetest.FaultCheck) string { return c.Name },
			[]string{"CutMidCallErrsAndRecovers", "DelayPastDeadline"})
		faultkit.RunEach(t, node.Addr(), fencetest.FaultTimeout, names(checks, func(c fencetest.FaultCheck) string { return c.Name }),
			func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) fencetest.FaultEnv {
				return fencetest.FaultEnv{Store: newStore(t, p.Dial), Proxy: p, Other: newStore(t, plain), NS: fencetest.Namespace()}
			},
			func(ctx context.Context, i int, env fencetest.FaultEnv) error { return checks[i].Run(ctx, env) })
	})
	t.Run("Backend", func(t *testing.T) {
		newBackend := func(t *testing.T, dial faultproxy.DialFunc) lock.Backend {
			b, err := fencenats.NewBackend(t.Context(), dialJS(t, node.URL(), dial), bucket, &fencenats.BackendOptions{Prefix: "faults_lock"})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		checks := faultChecks(locktest.FaultChecks(), func(c locktest.FaultCheck) string { return c.Name },
			[]string{"ReleaseLostReplyNotResent", "ExtendLostReplyRetried", "AcquireCutMidCallRetryable", "DelayPastDeadline"})
		faultkit.RunEach(t, node.Addr(), locktest.FaultTimeout, names(checks, func(c locktest.FaultCheck) string { return c.Name }),
			func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) locktest.FaultEnv {
				return locktest.FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, plain), NS: locktest.Namespace()}
			},
			func(ctx context.Context, i int, env locktest.FaultEnv) error { return checks[i].Run(ctx, env) })
	})
}

// faultChecks picks the checks named in keep, and panics when the kit no
// longer has one of them, so that a change of the kit gets reviewed here.
//
// Left out, for the Store: every lost-reply check (Put, Delete, Advance:
// LostReplyNotResent, RetryAfterLostReply, and RetryAfterNewerHolderIsStale).
// The kit holds every reply right after a warm-up on another key, and a
// write here is two requests, a read of the key on the stream's leader and
// the conditional publish: the read's reply is held, so the publish that
// would land is never sent and there is no lost reply to observe.
// JetStream cannot compare a header's value on the server, so a fenced
// write cannot be one request. For the same reason, for the Backend:
// AcquireLostReplyRetriedSameToken (an Acquire of a name the Backend has
// not seen reads first). A same-owner retry after an Acquire that landed is
// the conformance check SameOwnerReacquireKeepsToken; the linearizability
// check interrupts writes at random moments, lost replies included.
// Release and Extend of a lease the Backend took are one request (its
// lease cache), so their lost-reply checks run.
func faultChecks[C any](all []C, name func(C) string, keep []string) []C {
	var out []C
	for _, k := range keep {
		found := false
		for _, c := range all {
			if name(c) == k {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			panic("the fault kit has no check " + k + ": review faultChecks")
		}
	}
	return out
}

func names[C any](cs []C, name func(C) string) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = name(c)
	}
	return out
}
