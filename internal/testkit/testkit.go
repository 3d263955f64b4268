// Package testkit gives tests real Redis, PostgreSQL and MySQL/MariaDB
// servers.
//
// A test that needs a backend asks testkit, which tries in this order:
//
//  1. a URL from the environment (FENCEKIT_REDIS_URL, FENCEKIT_POSTGRES_URL,
//     FENCEKIT_MYSQL_URL);
//  2. local server binaries, started as throwaway instances on free loopback
//     ports in a temporary directory: one of each per test binary, started
//     on first use and shared by its tests (as the server of step 1 is), so
//     that every call of one test (Redis and RedisURL, say) reaches the same
//     server; removed when the test binary exits;
//  3. otherwise the test is skipped with a message that says what to provide.
//
// FENCEKIT_REQUIRE_BACKENDS=1 turns that skip into a failure; CI sets it
// (and its newcomer stage, which leaves it unset, fails on such a skip).
//
// Test binaries that import testkit drop go-redis's global log (see
// RedisLogEnv).
//
// Tests that kill, restart, pause or fail over a server always get their own
// throwaway instance, never the shared one from step 1.
//
// testkit needs only the standard library, go-redis, pgx and
// go-sql-driver/mysql: it is imported by the root module's tests, and
// everything a test of the root module imports becomes a requirement every
// consumer of fencekit sees in `go list -m all`. Running the suites against Docker containers (Redis,
// PostgreSQL, MariaDB) lives in the separate module internal/containers.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock"
)

// RequireEnv is the environment variable that turns a missing backend from a
// skip into a failure.
const RequireEnv = "FENCEKIT_REQUIRE_BACKENDS"

// Unavailable skips t, or fails it when FENCEKIT_REQUIRE_BACKENDS=1, saying
// which backend was missing and how to provide one.
func Unavailable(t testing.TB, what string, how string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s unavailable and %s=1: %s", what, RequireEnv, how)
	}
	t.Skipf("%s unavailable: %s", what, how)
}

// Namespace returns a short unique name for one test: a prefix for keys, a
// schema or table name. It is made of lowercase letters, digits and '_', so
// it is safe as a Redis key part and as a SQL identifier.
func Namespace(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testkit: random namespace: %v", err)
	}
	return "fk_" + hex.EncodeToString(b[:])
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and is
// at most max (0 means no bound). Redis Cluster nodes need ports at most
// 55535, because the cluster bus listens on port+10000.
func FreePort(t testing.TB, max int) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testkit: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if max == 0 || port <= max {
			return port
		}
	}
	t.Fatalf("testkit: no free port at most %d", max)
	return 0
}

// envURL returns the trimmed value of the environment variable name.
func envURL(name string) string { return strings.TrimSpace(os.Getenv(name)) }

// Context returns a context for one test's calls, bounded well inside the
// test binary's default timeout and cancelled when the test ends.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Owner returns a fresh lock owner value, failing t if crypto/rand does.
func Owner(t testing.TB) string {
	t.Helper()
	o, err := lock.NewOwner()
	if err != nil {
		t.Fatalf("testkit: owner: %v", err)
	}
	return o
}
