package fencectl

import (
	"testing"

	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
)

// TestPermits* hold semaphore and read-write permits on each backend and
// check that list, inspect and release --force see them (Hardening IV, 5).
func TestPermitsRedis(t *testing.T) {
	t.Parallel()
	permits(t, redisWorld(t))
}

func TestPermitsPostgres(t *testing.T) {
	t.Parallel()
	permits(t, postgresWorld(t))
}

func TestPermitsMySQL(t *testing.T) {
	t.Parallel()
	permits(t, mysqlWorld(t))
}

func TestPermitsPostgresSQL(t *testing.T) {
	t.Parallel()
	permits(t, postgresSQLWorld(t))
}

func permits(t *testing.T, w world) {
	if w.migrate != nil {
		w.migrate(t)
	}
	fencectltest.Permits(t, w.backend, "jobs/", func(args ...string) (int, string, string) {
		return ctl(t, w.env, w.args(args...)...)
	})
}
