package containers_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/containers"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// migratedDB returns a *sql.DB with go-sql-driver/mysql's default options on
// a fresh database of t's own on the MariaDB container, with the default
// tables created in it; the database is dropped when t ends.
func migratedDB(t *testing.T) *sql.DB {
	t.Helper()
	db := testkit.OpenMySQL(t, mysqlDatabase(t))
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

// TestMySQLConformance runs both conformance suites, Linearizable and
// Monotonic with sqldb.MySQL on the MariaDB container, through
// go-sql-driver/mysql with its default options; every check gets a
// database of its own.
func TestMySQLConformance(t *testing.T) {
	containers.MySQLURL(t) // skip once here rather than in every check
	t.Run("Store", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fence.Store { return sqldb.NewStore(migratedDB(t), sqldb.MySQL, nil) })
	})
	t.Run("Linearizable", func(t *testing.T) {
		fencetest.Linearizable(t, sqldb.NewStore(migratedDB(t), sqldb.MySQL, nil), nil)
	})
	newBackend := func(t *testing.T) lock.Backend { return sqldb.NewBackend(migratedDB(t), sqldb.MySQL, nil) }
	t.Run("Backend", func(t *testing.T) { locktest.Run(t, newBackend) })
	t.Run("Monotonic", func(t *testing.T) { locktest.Monotonic(t, newBackend) })
}
