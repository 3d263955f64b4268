package redis_test

import (
	"testing"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestElection runs the election checks on the shared Redis (the one named
// by FENCEKIT_REDIS_URL in CI), with go-redis's default options.
func TestElection(t *testing.T) {
	t.Parallel()
	client := testkit.Redis(t)
	drivertest.RunElection(t,
		func(t *testing.T) driver.Backend {
			return fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, client)})
		},
		func(t *testing.T) fence.Store {
			return fenceredis.NewStore(client, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, client)})
		})
}
