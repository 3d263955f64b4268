package redis_test

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// conformance runs both suites over client, each check under its own
// prefix: the Store's, and every check of the driver contract.
func conformance(t *testing.T, client goredis.UniversalClient) {
	t.Run("Store", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fence.Store {
			return fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, client)})
		})
	})
	t.Run("Linearizable", func(t *testing.T) {
		fencetest.Linearizable(t, fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, client)}), nil)
	})
	t.Run("Backend", func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) driver.Backend {
			return fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, client)})
		})
	})
}

// TestConformanceShared runs the suites on the server from testkit: the one
// named by FENCEKIT_REDIS_URL in CI.
func TestConformanceShared(t *testing.T) {
	t.Parallel()
	conformance(t, testkit.Redis(t))
}

// TestConformanceThrowaway runs the suites on a throwaway redis-server.
func TestConformanceThrowaway(t *testing.T) {
	t.Parallel()
	conformance(t, testkit.NewRedisServer(t).Client(t))
}

// The suites also run on a Redis Cluster: see TestCluster in cluster_test.go.
