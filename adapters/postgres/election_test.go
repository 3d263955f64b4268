package postgres_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestElection runs the election checks on the shared PostgreSQL (the one
// named by FENCEKIT_POSTGRES_URL in CI), each check with
// its lease table and its store table in schemas of their own.
func TestElection(t *testing.T) {
	t.Parallel()
	drivertest.RunElection(t,
		func(t *testing.T) driver.Backend {
			return postgres.NewBackend(migrated(t, testkit.Postgres(t)), nil)
		},
		func(t *testing.T) fence.Store {
			return postgres.NewStore(migrated(t, testkit.Postgres(t)), nil)
		})
}
