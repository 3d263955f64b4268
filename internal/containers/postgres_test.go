package containers_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/containers"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// migratedPool returns a pool on the PostgreSQL container whose connections
// use a fresh schema of t's own, with the default tables created in it.
func migratedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testkit.PostgresAt(t, containers.PostgresURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool
}

// TestPostgresConformance runs both conformance suites (drivertest's
// includes the token-monotonicity check) and Linearizable on the
// PostgreSQL container, with pgxpool's default configuration; every check
// gets a fresh schema.
func TestPostgresConformance(t *testing.T) {
	containers.PostgresURL(t) // skip once here rather than in every check
	t.Run("Store", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fence.Store { return postgres.NewStore(migratedPool(t), nil) })
	})
	t.Run("Linearizable", func(t *testing.T) {
		fencetest.Linearizable(t, postgres.NewStore(migratedPool(t), nil), nil)
	})
	newBackend := func(t *testing.T) driver.Backend { return postgres.NewBackend(migratedPool(t), nil) }
	t.Run("Backend", func(t *testing.T) { drivertest.Run(t, newBackend) })
}

// TestPostgresFaults runs both fault kits on the PostgreSQL container, every
// connection of the pool under test through the kit's proxy. The tables
// live in a schema of the test's own.
func TestPostgresFaults(t *testing.T) {
	url := containers.PostgresURL(t)
	admin := migratedPool(t)
	cfg := admin.Config()
	addr := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	pool := func(t *testing.T, dial faultproxy.DialFunc) *pgxpool.Pool {
		c := cfg.Copy()
		c.ConnConfig.DialFunc = dial
		p, err := pgxpool.NewWithConfig(context.Background(), c)
		if err != nil {
			t.Fatalf("pool on %s: %v", url, err)
		}
		t.Cleanup(p.Close)
		return p
	}
	t.Run("Store", func(t *testing.T) {
		fencetest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
			return postgres.NewStore(pool(t, dial), nil)
		})
	})
	t.Run("Backend", func(t *testing.T) {
		// An Acquire of one name or of a permit, and a resume, are one
		// request; a set's transaction sends BEGIN and the batch of its
		// statements, each waiting for its reply, before the COMMIT that
		// takes the set.
		drivertest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
			return postgres.NewBackend(pool(t, dial), nil)
		}, &drivertest.FaultOptions{RequestsBeforeSet: 2})
	})
}
