package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock"
)

// MultiFaultChecks returns the fault checks of the optional capability
// lock.MultiBackend, which RunMultiFaults runs.
func MultiFaultChecks() []FaultCheck {
	return []FaultCheck{
		{"AcquireMultiLostReplyRetriedSameTokens", checkMultiLostReply},
	}
}

// RunMultiFaults runs MultiFaultChecks as subtests of t, as RunFaults runs
// its checks (newBackend as there). requestsBeforeMulti is how many
// requests the backend's AcquireMulti sends, each waiting for its reply,
// before the one that takes the set (a transaction's BEGIN and statements
// before its COMMIT): 0 for a backend whose AcquireMulti is one request.
func RunMultiFaults(t *testing.T, addr string, newBackend NewNetBackend, requestsBeforeMulti int) {
	t.Helper()
	checks := MultiFaultChecks()
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.Name
	}
	faultkit.RunEach(t, addr, FaultTimeout, names,
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) FaultEnv {
			return FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, plain), NS: Namespace(), RequestsBeforeAcquire: requestsBeforeMulti}
		},
		func(ctx context.Context, i int, env FaultEnv) error { return checks[i].Run(ctx, env) })
}

// checkMultiLostReply: an AcquireMulti whose reply is lost after the server
// took the whole set, retried by the same owner, gets the same tokens and
// never ErrHeld; every name stays with that owner and its token.
func checkMultiLostReply(ctx context.Context, env FaultEnv) error {
	mb, ok := env.Backend.(lock.MultiBackend)
	if !ok {
		return fmt.Errorf("%T does not implement lock.MultiBackend", env.Backend)
	}
	a := owner()
	warm := []string{env.NS + "warm-a", env.NS + "warm-b"}
	if _, err := mb.AcquireMulti(ctx, warm, a, longTTL); err != nil {
		return fmt.Errorf("AcquireMulti(%q): %w", warm, err)
	}
	for _, n := range warm {
		if err := env.Backend.Release(ctx, n, a); err != nil {
			return err
		}
	}
	set := []string{env.NS + "a", env.NS + "b", env.NS + "c"}
	call := fmt.Sprintf("AcquireMulti(%q)", set)
	var got []fence.Token
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeAcquire, call,
		func(ctx context.Context) (err error) {
			got, err = mb.AcquireMulti(ctx, set, a, longTTL)
			return err
		},
		func(ctx context.Context) (bool, error) {
			info, err := env.Other.Inspect(ctx, set[len(set)-1])
			return err == nil && info.Held && info.Owner == a, err
		}, nil)
	if err != nil {
		return err
	}
	if errors.Is(callErr, lock.ErrHeld) {
		return fmt.Errorf("%s, whose reply was lost after the server took the set: %v; its owner holds every name", call, callErr)
	}
	want := make([]fence.Token, len(set))
	for i, n := range set {
		info, err := env.Other.Inspect(ctx, n)
		if err != nil {
			return err
		}
		if !info.Held || info.Owner != a {
			return fmt.Errorf("after the lost reply, %q is held by %q (held %v); want the set's owner: a part of the set", n, info.Owner, info.Held)
		}
		want[i] = info.Token
	}
	if callErr == nil && !slices.Equal(got, want) {
		return fmt.Errorf("%s with its reply lost returned tokens %v; the leases have %v", call, got, want)
	}
	retry, err := mb.AcquireMulti(ctx, set, a, longTTL)
	if err != nil {
		return fmt.Errorf("%s retried by the same owner after its reply was lost: %w; want the same leases", call, err)
	}
	if !slices.Equal(retry, want) {
		return fmt.Errorf("%s retried after its reply was lost: tokens %v; want %v", call, retry, want)
	}
	for _, n := range set {
		if err := env.Backend.Release(ctx, n, a); err != nil {
			return err
		}
	}
	return nil
}
