package locktest_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/wirestore"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// wireResumer gives a wirestore client a Resume made of its own calls: an
// Extend, then (when reacquires is set, the broken way) a Release and an
// Acquire, which mint a new token, and an Inspect for the token. Good
// enough for a test double of the fault kit: no other client touches the
// lock meanwhile.
type wireResumer struct {
	lock.Backend
	reacquires bool
}

func (w wireResumer) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if err := w.Extend(ctx, name, owner, ttl); err != nil {
		return 0, err
	}
	if w.reacquires {
		if err := w.Release(ctx, name, owner); err != nil {
			return 0, err
		}
		return w.Acquire(ctx, name, owner, ttl)
	}
	info, err := w.Inspect(ctx, name)
	if err != nil {
		return 0, err
	}
	if !info.Held || info.Owner != owner {
		return 0, lock.ErrNotHeld
	}
	return info.Token, nil
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
			env := locktest.FaultEnv{
				Backend: wireResumer{newBackend(t, p.Dial), tc.reacquires},
				Proxy:   p,
				Other:   newBackend(t, d.DialContext),
				NS:      locktest.Namespace(),
			}
			ctx, cancel := context.WithTimeout(context.Background(), locktest.FaultTimeout)
			defer cancel()
			err = locktest.ResumeFaultChecks()[0].Run(ctx, env)
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
			for _, c := range locktest.PermitFaultChecks() {
				p, err := faultproxy.Start(addr)
				if err != nil {
					t.Fatal(err)
				}
				var d net.Dialer
				env := locktest.FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, d.DialContext), NS: locktest.Namespace(), RequestsBeforePermit: tc.before}
				ctx, cancel := context.WithTimeout(context.Background(), locktest.FaultTimeout)
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
