package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// faultKit runs both fault kits (the Store's, and the driver's, whose
// checks cover locks, resume, sets and permits) on the server at url with
// go-redis clients whose options are the URL's, changed by harden when it
// is not nil. Every check's keys live under a prefix of the test's own.
func faultKit(t *testing.T, url string, harden func(*goredis.Options)) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := func(t *testing.T, dial faultproxy.DialFunc) *goredis.Client {
		o := *opts
		o.Dialer = dial
		if harden != nil {
			harden(&o)
		}
		c := goredis.NewClient(&o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	prefix := testkit.RedisPrefix(t, testkit.Redis(t))
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

// TestFaultsDefaultOptions runs the fault kits with go-redis's default
// options (MaxRetries 3, ContextTimeoutEnabled false), as most users run it.
func TestFaultsDefaultOptions(t *testing.T) {
	t.Parallel()
	faultKit(t, testkit.RedisURL(t), nil)
}

// TestFaultsHardenedOptions runs the fault kits with retries off and the
// context's deadline applied to the socket.
func TestFaultsHardenedOptions(t *testing.T) {
	t.Parallel()
	faultKit(t, testkit.RedisURL(t), func(o *goredis.Options) {
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
	})
}
