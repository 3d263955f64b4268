package redis_test

import (
	"testing"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestPermitNames: PermitNames names the semaphores and read-write locks
// in use under a prefix, for fencectl.
func TestPermitNames(t *testing.T) {
	t.Parallel()
	client := testkit.Redis(t)
	b := fenceredis.NewBackend(client, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, client)})
	fencectltest.PermitNames(t, b, b.PermitNames, false)
}
