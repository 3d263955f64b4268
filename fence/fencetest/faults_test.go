package fencetest_test

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/wirestore"
)

// wireServer starts a wirestore server for t.
func wireServer(t *testing.T) *wirestore.Server {
	t.Helper()
	srv, err := wirestore.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// wireStores returns a constructor of wirestore clients with defects d.
func wireStores(addr string, d wirestore.Defects) fencetest.NewNetStore {
	return func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
		c := wirestore.NewClient(addr, dial, d)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// TestRunFaultsOnANetworkStore runs the kit on a correct network store.
func TestRunFaultsOnANetworkStore(t *testing.T) {
	srv := wireServer(t)
	fencetest.RunFaults(t, srv.Addr(), wireStores(srv.Addr(), wirestore.Defects{}))
}

// faultFailures runs every fault check against a store made by newStore and
// returns the names that failed, with their errors.
func faultFailures(t *testing.T, addr string, newStore fencetest.NewNetStore, requestsBeforeWrite int) map[string]error {
	t.Helper()
	failed := map[string]error{}
	for _, c := range fencetest.FaultChecks() {
		p, err := faultproxy.Start(addr)
		if err != nil {
			t.Fatal(err)
		}
		var d net.Dialer
		env := fencetest.FaultEnv{Store: newStore(t, p.Dial), Proxy: p, Other: newStore(t, d.DialContext), NS: fencetest.Namespace(), RequestsBeforeWrite: requestsBeforeWrite}
		ctx, cancel := context.WithTimeout(context.Background(), fencetest.FaultTimeout)
		if err := c.Run(ctx, env); err != nil {
			failed[c.Name] = err
		}
		cancel()
		_ = p.Close()
	}
	return failed
}

// TestFaultKitCatchesBrokenClients shows that each fault check fails on a
// client with the defect it is about, and only the checks about that defect
// do.
func TestFaultKitCatchesBrokenClients(t *testing.T) {
	srv := wireServer(t)
	var names []string
	for _, c := range fencetest.FaultChecks() {
		names = append(names, c.Name)
	}
	for _, tc := range []struct {
		name     string
		defects  wirestore.Defects
		mustFail []string
	}{
		{
			// go-redis with its default MaxRetries does this to any command
			// not marked NoRetry.
			name:     "resends writes after a network error",
			defects:  wirestore.Defects{ResendWrites: true},
			mustFail: []string{"PutLostReplyNotResent", "DeleteLostReplyNotResent", "AdvanceLostReplyNotResent"},
		},
		{
			// go-redis with its default ContextTimeoutEnabled=false does
			// this: the socket's 3 s ReadTimeout, not the context, ends a
			// call.
			name:     "waits for its socket timeout instead of the context",
			defects:  wirestore.Defects{IgnoreContext: true},
			mustFail: []string{"DelayPastDeadline"},
		},
		{
			name:     "reports a failed write as done",
			defects:  wirestore.Defects{SwallowErrors: true},
			mustFail: []string{"CutMidCallErrsAndRecovers", "DelayPastDeadline"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := faultFailures(t, srv.Addr(), wireStores(srv.Addr(), tc.defects), 0)
			for _, name := range names {
				err, didFail := failed[name]
				switch want := slices.Contains(tc.mustFail, name); {
				case want && !didFail:
					t.Errorf("%s passed on a client that %s", name, tc.name)
				case !want && didFail:
					t.Errorf("%s failed on a client that only %s: %v", name, tc.name, err)
				case didFail:
					t.Logf("%s caught it: %v", name, err)
				}
			}
		})
	}
}

// TestFaultKitRequestsBeforeWrite: on a store whose write reads the key
// first (two requests), the kit with RequestsBeforeWrite 1 lets the read's
// reply through and loses the write's: every check passes on a correct
// client, and the lost-reply checks still catch one that resends writes.
func TestFaultKitRequestsBeforeWrite(t *testing.T) {
	srv := wireServer(t)
	for _, tc := range []struct {
		name     string
		defects  wirestore.Defects
		mustFail []string
	}{
		{"correct", wirestore.Defects{ReadFirst: true}, nil},
		{"resends writes after a network error", wirestore.Defects{ReadFirst: true, ResendWrites: true},
			[]string{"PutLostReplyNotResent", "DeleteLostReplyNotResent", "AdvanceLostReplyNotResent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := faultFailures(t, srv.Addr(), wireStores(srv.Addr(), tc.defects), 1)
			for _, c := range fencetest.FaultChecks() {
				err, didFail := failed[c.Name]
				if want := slices.Contains(tc.mustFail, c.Name); want != didFail {
					t.Errorf("%s on a client that reads before it writes (%s): failed %v (%v), want failed %v", c.Name, tc.name, didFail, err, want)
				}
			}
		})
	}
}
