package redis_test

import (
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// remintingMulti is the set acquire of a client that starts every attempt
// afresh: it releases each name, then takes the set, so that a retry after
// a lost reply mints new tokens.
type remintingMulti struct{ *fenceredis.Backend }

func (r remintingMulti) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	for _, n := range req.Names {
		_ = r.Release(ctx, driver.Claim{Name: n, Owner: req.Owner, Kind: driver.Exclusive})
	}
	return r.Backend.Acquire(ctx, req)
}

// TestMultiFaultCheckCatchesARetryThatMints: the set's lost-reply check
// fails on a client whose retry mints new tokens (its releases are the
// three requests before the set's script).
func TestMultiFaultCheckCatchesARetryThatMints(t *testing.T) {
	opts, err := goredis.ParseURL(testkit.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	prefix := testkit.RedisPrefix(t, testkit.Redis(t))
	newBackend := func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
		o := *opts
		o.Dialer = dial
		c := goredis.NewClient(&o)
		t.Cleanup(func() { _ = c.Close() })
		return remintingMulti{fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})}
	}
	var check drivertest.FaultCheck
	for _, c := range drivertest.FaultChecks() {
		if c.Name == "SetLostReplyRetriedSameTokens" {
			check = c
		}
	}
	require.NotNil(t, check.Run, "the fault kit's set check")
	var failed error
	faultkit.RunEach(t, opts.Addr, drivertest.FaultTimeout, []string{check.Name},
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) drivertest.FaultEnv {
			return drivertest.FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, plain), NS: drivertest.Namespace(),
				FaultOptions: drivertest.FaultOptions{RequestsBeforeSet: 3}}
		},
		func(ctx context.Context, _ int, env drivertest.FaultEnv) error {
			failed = check.Run(ctx, env)
			return nil
		})
	if failed == nil || !strings.Contains(failed.Error(), "retried after its reply was lost") {
		t.Fatalf("%s on a client whose retry mints: %v; want the retried tokens reported", check.Name, failed)
	}
	t.Logf("%s: %v", check.Name, failed)
}
