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

// wireResumer gives a wirestore client a resume made of its own calls: an
// Extend, then (when reacquires is set, the broken way) a Release and an
// Acquire, which mint a new token, and an Inspect for the token. Good
// enough for a test double of the fault kit: no other client touches the
// lock meanwhile. Every other request goes through as it is.
type wireResumer struct {
	driver.Backend
	reacquires bool
}

func (w wireResumer) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !req.Resume {
		return w.Backend.Acquire(ctx, req)
	}
	claim := driver.Claim{Name: req.Name, Owner: req.Owner, Kind: req.Kind}
	if err := w.Extend(ctx, claim, req.TTL); err != nil {
		return driver.Grant{}, err
	}
	if w.reacquires {
		if err := w.Release(ctx, claim); err != nil {
			return driver.Grant{}, err
		}
		req.Resume = false
		return w.Backend.Acquire(ctx, req)
	}
	info, err := w.Inspect(ctx, req.Name, driver.Exclusive)
	if err != nil {
		return driver.Grant{}, err
	}
	if len(info.Holders) != 1 || info.Holders[0].Owner != req.Owner {
		return driver.Grant{}, driver.ErrNotHeld
	}
	return driver.Grant{Token: info.Holders[0].Token}, nil
}

// TestResumeFaultCheck: the lost-reply check of Resume passes on a Resume
// that keeps the token and fails on one that takes the lock again with a
// new token when it is retried.
func TestResumeFaultCheck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reacquires bool
	}{{"keeps the token", false}, {"takes a new token", true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr, newBackend := wireBackends(t, wirestore.Defects{})
			p, err := faultproxy.Start(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var d net.Dialer
			env := drivertest.FaultEnv{
				Backend: wireResumer{newBackend(t, p.Dial), tc.reacquires},
				Proxy:   p,
				Other:   newBackend(t, d.DialContext),
				NS:      drivertest.Namespace(),
			}
			ctx, cancel := context.WithTimeout(context.Background(), drivertest.FaultTimeout)
			defer cancel()
			err = faultCheck(t, "ResumeLostReplyRetriedSameToken").Run(ctx, env)
			switch {
			case tc.reacquires && err == nil:
				t.Fatal("ResumeLostReplyRetriedSameToken passed on a Resume that takes a new token")
			case !tc.reacquires && err != nil:
				t.Fatal(err)
			}
			t.Logf("result: %v", err)
		})
	}
}

// TestPermitFaultChecks: the permit fault checks pass on a correct network
// backend, and the lost-reply check fails on a client that releases and
// asks again on every attempt, so that its retry mints a new token.
func TestPermitFaultChecks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defects  wirestore.Defects
		before   int // requests before the one that takes the permit
		mustFail []string
	}{
		{"correct", wirestore.Defects{}, 0, nil},
		{"mints again on a retry", wirestore.Defects{RemintPermits: true}, 1, []string{"PermitAcquireLostReplyRetriedSameToken"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, newBackend := wireBackends(t, tc.defects)
			for _, c := range []drivertest.FaultCheck{faultCheck(t, "PermitAcquireLostReplyRetriedSameToken"), faultCheck(t, "PermitQueueLostReplyKeepsOnePlace")} {
				p, err := faultproxy.Start(addr)
				if err != nil {
					t.Fatal(err)
				}
				var d net.Dialer
				env := drivertest.FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, d.DialContext), NS: drivertest.Namespace(),
					FaultOptions: drivertest.FaultOptions{RequestsBeforePermit: tc.before}}
				ctx, cancel := context.WithTimeout(context.Background(), drivertest.FaultTimeout)
				err = c.Run(ctx, env)
				cancel()
				_ = p.Close()
				switch want := slices.Contains(tc.mustFail, c.Name); {
				case want && err == nil:
					t.Errorf("%s passed on a client that %s", c.Name, tc.name)
				case !want && err != nil:
					t.Errorf("%s failed: %v", c.Name, err)
				case err != nil:
					t.Logf("%s: %v", c.Name, err)
				}
			}
		})
	}
}

// faultCheck returns the fault check called name.
func faultCheck(t *testing.T, name string) drivertest.FaultCheck {
	t.Helper()
	for _, c := range drivertest.FaultChecks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no fault check named %q", name)
	return drivertest.FaultCheck{}
}
