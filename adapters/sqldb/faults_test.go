package sqldb_test

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// TestFaults runs both fault kits, and the permit fault checks, on MariaDB
// and PostgreSQL (pgx stdlib, default options), every connection of the
// store or backend under test made through the kit's dial function.
//
// go-sql-driver/mysql runs with interpolateParams=true here: with its
// default (server-side prepared statements) every call is two round trips,
// a prepare and then an execute, and the kit, which holds the replies that
// follow a warm-up call, stalls the prepare before the write is sent. A
// prepare whose reply is lost has executed nothing, and the driver
// reports it as driver.ErrBadConn, which database/sql retries; the execute
// that follows is the same single statement as with interpolation.
func TestFaults(t *testing.T) {
	interpolate := func(c *mysql.Config) { c.InterpolateParams = true }
	for _, s := range []server{mysqlServer(t, "mysql-interpolate", interpolate), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			admin := s.open(t, nil)
			opts := tables(t, admin, s.d)
			addr := s.address(t)
			t.Run("Store", func(t *testing.T) {
				fencetest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) fence.Store {
					return sqldb.NewStore(s.open(t, dial), s.d, opts)
				})
			})
			t.Run("Backend", func(t *testing.T) {
				locktest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) lock.Backend {
					return sqldb.NewBackend(s.open(t, dial), s.d, opts)
				})
			})
			// AcquirePermit's transaction sends its statements one at a
			// time before the COMMIT that grants: on MySQL BEGIN, the
			// insert-or-lock, the locking read, the owner row and the
			// name's row; on PostgreSQL BEGIN, the insert-or-lock, the
			// locking read and the one write (TestPermitRoundTrips).
			before := 4
			if s.d == sqldb.MySQL {
				before = 5
			}
			t.Run("Permits", func(t *testing.T) {
				locktest.RunPermitFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) lock.Backend {
					return sqldb.NewBackend(s.open(t, dial), s.d, opts)
				}, before)
			})
		})
	}
}
