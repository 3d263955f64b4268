package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// migrated returns pool after creating the default tables in its schema.
func migrated(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}

// TestConformance runs both conformance suites against the shared server
// (FENCEKIT_POSTGRES_URL or a local instance) and against a
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
			newBackend := func(t *testing.T) lock.Backend {
				return postgres.NewBackend(migrated(t, pool(t)), nil)
			}
			t.Run("Backend", func(t *testing.T) { locktest.Run(t, newBackend) })
			t.Run("Monotonic", func(t *testing.T) { locktest.Monotonic(t, newBackend) })
			t.Run("Metadata", func(t *testing.T) { locktest.RunMetadata(t, newBackend) })
		})
	}
}
