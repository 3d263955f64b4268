package lab

import (
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit"
)

// withMySQL points -mysql-url at testkit's server for t.
func withMySQL(t *testing.T) string {
	t.Helper()
	url := testkit.MySQLURL(t)
	old := *mysqlURL
	*mysqlURL = url
	t.Cleanup(func() { *mysqlURL = old })
	return url
}

// The scenarios on MySQL/MariaDB through the sqldb adapter.
func TestScenariosOnMySQL(t *testing.T) {
	withMySQL(t)
	runOn(t, "mysql")
}

// fencelab chaos -backend mysql behind the in-process fault proxy: clean
// when fenced; with -unfenced the checker reports lost increments and the
// command exits 1.
func TestChaosCommandMySQL(t *testing.T) {
	url := withMySQL(t)
	t.Run("fenced", func(t *testing.T) {
		code, out := chaosCLI(t, "-backend", "mysql", "-mysql-url", url, "-duration", "1s", "-fault-every", "100ms")
		if code != 0 || !strings.Contains(out, "proxy 127.0.0.1:") || !strings.Contains(out, "no violation") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	// The lock shapes of issue 23 on sqldb: sets of names taken in one
	// transaction, and the permits of a read-write lock and a semaphore,
	// behind the same faults.
	for _, shape := range [][]string{{"-sets"}, {"-shape", "rw"}, {"-shape", "semaphore", "-permits", "2"}} {
		t.Run("fenced "+strings.Join(shape, " "), func(t *testing.T) {
			args := append([]string{"-backend", "mysql", "-mysql-url", url, "-duration", "3s", "-fault-every", "100ms"}, shape...)
			code, out := chaosCLI(t, args...)
			if code != 0 || !strings.Contains(out, "no violation") {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			t.Log(out)
		})
	}
	t.Run("unfenced", func(t *testing.T) {
		// One key, frequent pauses: about twenty lost increments in
		// every trial run; one is enough.
		unfencedLoses(t, "mysql -unfenced", nil, "-backend", "mysql", "-mysql-url", url, "-duration", "2s", "-ttl", "30ms",
			"-workers", "6", "-keys", "1", "-pause", "0.5", "-faults=false", "-unfenced")
	})
}
