package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestConformance runs the store's conformance suite and the driver
// contract's (drivertest.Run: every check of every lock shape) against the
// shared server (FENCEKIT_POSTGRES_URL or a local instance) and against a
// throwaway local instance of this test's own. Every check gets a fresh
// schema.
func TestConformance(t *testing.T) {
	servers := map[string]func(t *testing.T) *pgxpool.Pool{
		"shared": func(t *testing.T) *pgxpool.Pool { return testkit.Postgres(t) },
	}
	var local *testkit.PostgresServer
	servers["throwaway"] = func(t *testing.T) *pgxpool.Pool {
		return local.Pool(t)
	}
	for _, name := range []string{"shared", "throwaway"} {
		pool := servers[name]
		t.Run(name, func(t *testing.T) {
			if name == "throwaway" {
				local = testkit.NewPostgresServer(t)
			}
			t.Run("Store", func(t *testing.T) {
				fencetest.Run(t, func(t *testing.T) fence.Store {
					return postgres.NewStore(migrated(t, pool(t)), nil)
				})
			})
			t.Run("Linearizable", func(t *testing.T) {
				fencetest.Linearizable(t, postgres.NewStore(migrated(t, pool(t)), nil), nil)
			})
			t.Run("Backend", func(t *testing.T) {
				drivertest.Run(t, func(t *testing.T) driver.Backend {
					return postgres.NewBackend(migrated(t, pool(t)), nil)
				})
			})
		})
	}
}
