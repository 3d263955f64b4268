package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// checkSetLostReply: an Acquire of a set whose reply is lost after the
// server took the whole set, retried by the same owner, gets the same tokens
// and never ErrHeld; every name stays with that owner and its token. A
// backend that answers driver.ErrNotAtomic for the set has no one-step set
// to lose a reply of: the Client takes its names one by one, which the
// lock's checks cover, and the check passes.
func checkSetLostReply(ctx context.Context, env FaultEnv) error {
	a := owner()
	warm := []string{env.NS + "warm-a", env.NS + "warm-b"}
	if _, err := env.Backend.Acquire(ctx, setRequest(warm, a, longTTL)); errors.Is(err, driver.ErrNotAtomic) {
		return nil
	} else if err != nil {
		return fmt.Errorf("Acquire of the set %q: %w", warm, err)
	}
	for _, n := range warm {
		if err := release(ctx, env.Backend, n, a); err != nil {
			return err
		}
	}
	set := []string{env.NS + "a", env.NS + "b", env.NS + "c"}
	call := fmt.Sprintf("Acquire of the set %q", set)
	var got []fence.Token
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeSet, call,
		func(ctx context.Context) error {
			g, err := env.Backend.Acquire(ctx, setRequest(set, a, longTTL))
			got = g.Tokens
			return err
		},
		func(ctx context.Context) (bool, error) {
			info, err := inspect(ctx, env.Other, set[len(set)-1])
			return err == nil && info.Held && info.Owner == a, err
		}, nil)
	if err != nil {
		return err
	}
	if errors.Is(callErr, driver.ErrHeld) {
		return fmt.Errorf("%s, whose reply was lost after the server took the set: %v; its owner holds every name", call, callErr)
	}
	want := make([]fence.Token, len(set))
	for i, n := range set {
		info, err := inspect(ctx, env.Other, n)
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
	retry, err := env.Backend.Acquire(ctx, setRequest(set, a, longTTL))
	if err != nil {
		return fmt.Errorf("%s retried by the same owner after its reply was lost: %w; want the same leases", call, err)
	}
	if !slices.Equal(retry.Tokens, want) {
		return fmt.Errorf("%s retried after its reply was lost: tokens %v; want %v", call, retry.Tokens, want)
	}
	for _, n := range set {
		if err := release(ctx, env.Backend, n, a); err != nil {
			return err
		}
	}
	return nil
}
