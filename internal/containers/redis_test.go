package containers_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/containers"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestRedisConformance runs both conformance suites (drivertest's includes
// the token-monotonicity check) and Linearizable on the Redis container,
// with go-redis's default options.
func TestRedisConformance(t *testing.T) {
	client := testkit.RedisAt(t, containers.RedisURL(t))
	t.Run("Store", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fence.Store {
			return fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, client)})
		})
	})
	t.Run("Linearizable", func(t *testing.T) {
		fencetest.Linearizable(t, fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, client)}), nil)
	})
	newBackend := func(t *testing.T) driver.Backend {
		return fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, client)})
	}
	t.Run("Backend", func(t *testing.T) { drivertest.Run(t, newBackend) })
}

// TestRedisFaults runs both fault kits on the Redis container, every
// connection of the client under test through the kit's proxy.
func TestRedisFaults(t *testing.T) {
	url := containers.RedisURL(t)
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := func(t *testing.T, dial faultproxy.DialFunc) *goredis.Client {
		o := *opts
		o.Dialer = dial
		c := goredis.NewClient(&o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	prefix := testkit.RedisPrefix(t, testkit.RedisAt(t, url))
	t.Run("Store", func(t *testing.T) {
		fencetest.RunFaults(t, opts.Addr, func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
			return fenceredis.NewStore(client(t, dial), &fenceredis.StoreOptions{Prefix: prefix})
		})
	})
	t.Run("Backend", func(t *testing.T) {
		// Every Acquire, of a lock, a set or a permit, and a resume, is
		// one script: no request goes before the grant (nil options).
		drivertest.RunFaults(t, opts.Addr, func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
			return fenceredis.NewBackend(client(t, dial), &fenceredis.BackendOptions{Prefix: prefix})
		}, nil)
	})
}
