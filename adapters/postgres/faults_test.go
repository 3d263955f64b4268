package postgres_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestFaults runs the store's fault kit and the driver contract's
// (drivertest.RunFaults, every lock shape) on pgxpool with its default
// configuration, every connection made through the kit's dial function.
// The tables are the test's own and are dropped when it ends.
func TestFaults(t *testing.T) {
	t.Parallel()
	url := testkit.PostgresURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	ns := testkit.Namespace(t)
	opts := &postgres.Options{StoreTable: pgx.Identifier{ns + "_store"}, LeaseTable: pgx.Identifier{ns + "_leases"}}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if err := postgres.Migrate(ctx, admin, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tables := []pgx.Identifier{opts.StoreTable, opts.LeaseTable}
		for _, suffix := range []string{"_queue", "_permits", "_permit_holders", "_permit_places"} {
			tables = append(tables, pgx.Identifier{ns + "_leases" + suffix})
		}
		for _, table := range tables {
			if _, err := admin.Exec(ctx, "DROP TABLE IF EXISTS "+table.Sanitize()); err != nil {
				t.Logf("drop %s: %v", table.Sanitize(), err)
			}
		}
	})

	pool := func(t *testing.T, dial faultproxy.DialFunc) *pgxpool.Pool {
		c := cfg.Copy()
		c.ConnConfig.DialFunc = dial
		p, err := pgxpool.NewWithConfig(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	t.Run("Store", func(t *testing.T) {
		fencetest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
			return postgres.NewStore(pool(t, dial), opts)
		})
	})
	t.Run("Backend", func(t *testing.T) {
		// An acquire of a set is a transaction: BEGIN and the batch of the
		// set's statements, each waiting for its reply, then the COMMIT
		// that takes the set. An acquire of a permit is one request: a
		// batch, sent as one write.
		drivertest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
			return postgres.NewBackend(pool(t, dial), opts)
		}, &drivertest.FaultOptions{RequestsBeforeSet: 2})
	})
}
