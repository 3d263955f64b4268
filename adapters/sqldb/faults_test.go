package sqldb_test

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestFaults runs both fault kits (the driver's includes the permit, set
// and resume fault checks) on MariaDB and PostgreSQL (pgx stdlib, default
// options), every connection of the store or backend under test made
// through the kit's dial function.
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
			// An Acquire of one name and a resume are one statement. A
			// set's transaction sends BEGIN and one statement per name
			// (three in the kit's set) before its COMMIT
			// (TestAcquireMultiStatements). A permit's transaction sends
			// its statements one at a time before the COMMIT that grants:
			// on MySQL BEGIN, the insert-or-lock, the claim of the owner
			// row, the locking read, the owner row and the name's row; on
			// PostgreSQL BEGIN, the insert-or-lock, the locking read and
			// the one write (TestPermitRoundTrips).
			fo := &drivertest.FaultOptions{RequestsBeforeSet: 4, RequestsBeforePermit: 4}
			if s.d == sqldb.MySQL {
				fo.RequestsBeforePermit = 6
			}
			t.Run("Backend", func(t *testing.T) {
				drivertest.RunFaults(t, addr, func(t *testing.T, dial faultproxy.DialFunc) driver.Backend {
					return sqldb.NewBackend(s.open(t, dial), s.d, opts)
				}, fo)
			})
		})
	}
}
