package sqldb_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestConformance runs both conformance suites (the driver's, drivertest.Run,
// checks every obligation of the contract, token monotonicity and holder
// metadata included) and the linearizability check on MariaDB through
// go-sql-driver/mysql with its default options and on PostgreSQL through
// pgx's database/sql driver and through lib/pq (whose deadline errors are
// the server's 57014); and both conformance suites again on MariaDB with
// clientFoundRows=true (the affected-rows setting that the MySQL statements
// must not depend on).
// Each configuration gets tables of its own, which its checks share: every
// check keeps to keys and lock names under a random prefix of its own, and
// creating two tables per check cost more than the checks themselves.
func TestConformance(t *testing.T) {
	for _, s := range servers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			t.Run("Store", func(t *testing.T) {
				fencetest.Run(t, func(t *testing.T) fence.Store { return sqldb.NewStore(db, s.d, opts) })
			})
			newBackend := func(t *testing.T) driver.Backend { return sqldb.NewBackend(db, s.d, opts) }
			t.Run("Backend", func(t *testing.T) { drivertest.Run(t, newBackend) })
			if s.name == "mysql-foundrows" {
				return // the rest does not look at affected rows
			}
			t.Run("Linearizable", func(t *testing.T) {
				fencetest.Linearizable(t, sqldb.NewStore(db, s.d, opts), nil)
			})
		})
	}
}
