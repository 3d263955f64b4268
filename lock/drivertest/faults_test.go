package drivertest_test

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/wirestore"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// wireBackends starts a wirestore server and returns a constructor of
// clients with defects d.
func wireBackends(t *testing.T, d wirestore.Defects) (addr string, newBackend drivertest.NewNetBackend) {
	t.Helper()
	srv, err := wirestore.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv.Addr(), func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
		c := wirestore.NewClient(srv.Addr(), dial, d)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// TestRunFaultsOnANetworkBackend runs the whole kit on a correct network
// backend, which serves every shape: every check, and no gap.
func TestRunFaultsOnANetworkBackend(t *testing.T) {
	addr, newBackend := wireBackends(t, wirestore.Defects{})
	drivertest.RunFaults(t, addr, newBackend, nil)
}

// TestFaultKitCatchesBrokenClients shows that each fault check fails on a
// client with the defect it is about, and only those checks do.
func TestFaultKitCatchesBrokenClients(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defects  wirestore.Defects
		mustFail []string
	}{
		{
			// go-redis with its default MaxRetries resends a Release whose
			// reply was lost.
			name:     "resends a Release after a network error",
			defects:  wirestore.Defects{ResendWrites: true},
			mustFail: []string{"ReleaseLostReplyNotResent"},
		},
		{
			name:     "waits for its socket timeout instead of the context",
			defects:  wirestore.Defects{IgnoreContext: true},
			mustFail: []string{"DelayPastDeadline"},
		},
		{
			name:     "reports a failed Release as done",
			defects:  wirestore.Defects{SwallowErrors: true},
			mustFail: []string{"DelayPastDeadline"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, newBackend := wireBackends(t, tc.defects)
			for _, c := range drivertest.FaultChecks() {
				p, err := faultproxy.Start(addr)
				if err != nil {
					t.Fatal(err)
				}
				var d net.Dialer
				env := drivertest.FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, d.DialContext), NS: drivertest.Namespace()}
				ctx, cancel := context.WithTimeout(context.Background(), drivertest.FaultTimeout)
				err = c.Run(ctx, env)
				cancel()
				_ = p.Close()
				switch want := slices.Contains(tc.mustFail, c.Name); {
				case want && err == nil:
					t.Errorf("%s passed on a client that %s", c.Name, tc.name)
				case !want && err != nil:
					t.Errorf("%s failed on a client that only %s: %v", c.Name, tc.name, err)
				case err != nil:
					t.Logf("%s caught it: %v", c.Name, err)
				}
			}
		})
	}
}
