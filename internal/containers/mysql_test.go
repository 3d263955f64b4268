package containers_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/containers"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// migratedDB returns a *sql.DB with go-sql-driver/mysql's default options on
// a fresh database of t's own on the MariaDB container, with the default
// tables created in it; the database is dropped when t ends.
func migratedDB(t *testing.T) *sql.DB {
	t.Helper()
	return migrate(t, testkit.OpenMySQL(t, mysqlDatabase(t)))
}

// migrate creates the default tables with sqldb.MySQL on db and returns db.
func migrate(t *testing.T, db *sql.DB) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqldb.Migrate(ctx, db, sqldb.MySQL, nil); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return db
}

// mysqlDatabase creates a database of t's own on the container and returns
// a driver configuration that uses it.
func mysqlDatabase(t *testing.T) *mysql.Config {
	t.Helper()
	return testkit.MySQLConfigAt(t, containers.MySQLURL(t))
}

// TestMySQLConformance checks that the container runs MariaDB, then runs
// both conformance suites (drivertest's includes the token-monotonicity
// check) and Linearizable with sqldb.MySQL on it, through
// go-sql-driver/mysql with its default options; every check gets a
// database of its own.
func TestMySQLConformance(t *testing.T) {
	// Skip once here rather than in every check, and make sure the
	// container is the server this test claims to cover.
	var version string
	if err := testkit.OpenMySQL(t, mysqlDatabase(t)).QueryRowContext(testkit.Context(t), "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatalf("SELECT VERSION(): %v", err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Fatalf("server version %q: not MariaDB", version)
	}
	t.Logf("server: %s", version)
	t.Run("Store", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fence.Store { return sqldb.NewStore(migratedDB(t), sqldb.MySQL, nil) })
	})
	t.Run("Linearizable", func(t *testing.T) {
		fencetest.Linearizable(t, sqldb.NewStore(migratedDB(t), sqldb.MySQL, nil), nil)
	})
	newBackend := func(t *testing.T) driver.Backend { return sqldb.NewBackend(migratedDB(t), sqldb.MySQL, nil) }
	t.Run("Backend", func(t *testing.T) { drivertest.Run(t, newBackend) })
}

// TestMySQLFaults runs both fault kits with sqldb.MySQL on the MariaDB
// container, every connection of the pool under test through the kit's
// proxy. go-sql-driver/mysql runs with interpolateParams=true, as in
// adapters/sqldb's TestFaults: with server-side prepared statements each
// call is a prepare and an execute, and the kit, which holds the replies
// that follow a warm-up call, would stall the prepare instead of the write.
func TestMySQLFaults(t *testing.T) {
	cfg := mysqlDatabase(t)
	cfg.InterpolateParams = true
	migrate(t, testkit.OpenMySQL(t, cfg))
	pool := func(t *testing.T, dial faultproxy.DialFunc) *sql.DB {
		c := cfg.Clone()
		c.DialFunc = dial
		return testkit.OpenMySQL(t, c)
	}
	t.Run("Store", func(t *testing.T) {
		fencetest.RunFaults(t, cfg.Addr, func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
			return sqldb.NewStore(pool(t, dial), sqldb.MySQL, nil)
		})
	})
	t.Run("Backend", func(t *testing.T) {
		// An Acquire of one name and a resume are one statement. A set's
		// transaction sends BEGIN and one statement per name (three in
		// the kit's set) before its COMMIT; a permit's sends BEGIN, the
		// insert-or-lock, the claim of the owner row, the locking read,
		// the owner row and the name's row before the COMMIT that grants
		// (as in adapters/sqldb's TestFaults).
		drivertest.RunFaults(t, cfg.Addr, func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
			return sqldb.NewBackend(pool(t, dial), sqldb.MySQL, nil)
		}, &drivertest.FaultOptions{RequestsBeforeSet: 4, RequestsBeforePermit: 6})
	})
}
