package postgres_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestAdminPermitNames: PermitNames names the semaphores and read-write
// locks in use under a prefix, for fencectl.
func TestAdminPermitNames(t *testing.T) {
	t.Parallel()
	pool := migrated(t, testkit.Postgres(t))
	fencectltest.PermitNames(t, postgres.NewBackend(pool, nil), postgres.NewAdmin(pool, nil).PermitNames, false)
}
