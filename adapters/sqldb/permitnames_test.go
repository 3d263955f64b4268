package sqldb_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
)

// TestAdminPermitNames: PermitNames names the semaphores and read-write
// locks in use under a prefix, for fencectl, on every server.
func TestAdminPermitNames(t *testing.T) {
	for _, s := range adminServers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			fencectltest.PermitNames(t, sqldb.NewBackend(db, s.d, opts), sqldb.NewAdmin(db, s.d, opts).PermitNames, false)
		})
	}
}
