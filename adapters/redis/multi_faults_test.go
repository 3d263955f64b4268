package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// remintingMulti is the set acquire of a client that starts every attempt
// afresh: it releases each name, then takes the set, so that a retry after
// a lost reply mints new tokens.
type remintingMulti struct{ *fenceredis.Backend }

func (r remintingMulti) AcquireMulti(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	for _, n := range names {
		_ = r.Release(ctx, n, owner)
	}
	return r.Backend.AcquireMulti(ctx, names, owner, ttl)
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
	newBackend := func(t *testing.T, dial faultproxy.DialFunc) lock.Backend {
		o := *opts
		o.Dialer = dial
		c := goredis.NewClient(&o)
		t.Cleanup(func() { _ = c.Close() })
		return remintingMulti{fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})}
	}
	check := locktest.MultiFaultChecks()[0]
	var failed error
	faultkit.RunEach(t, opts.Addr, locktest.FaultTimeout, []string{check.Name},
		func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) locktest.FaultEnv {
			return locktest.FaultEnv{Backend: newBackend(t, p.Dial), Proxy: p, Other: newBackend(t, plain), NS: locktest.Namespace(), RequestsBeforeAcquire: 3}
		},
		func(ctx context.Context, _ int, env locktest.FaultEnv) error {
			failed = check.Run(ctx, env)
			return nil
		})
	if failed == nil || !strings.Contains(failed.Error(), "retried after its reply was lost") {
		t.Fatalf("%s on a client whose retry mints: %v; want the retried tokens reported", check.Name, failed)
	}
	t.Logf("%s: %v", check.Name, failed)
}
