package testkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Environment variables that choose the PostgreSQL server for tests.
const (
	// PostgresURLEnv names a running server to use (step 1).
	PostgresURLEnv = "FENCEKIT_POSTGRES_URL"
	// PostgresBinEnv names the directory holding initdb and postgres for
	// step 2, when they are neither on PATH nor in a usual place.
	PostgresBinEnv = "FENCEKIT_POSTGRES_BIN"
)

const postgresHow = "set FENCEKIT_POSTGRES_URL or install PostgreSQL server binaries"

// sharedPostgres is the server PostgresURL started without an environment
// URL: one per test binary, shared by every test in it, and removed by its
// watchdog (see startWatchdog) when the binary exits.
var sharedPostgres struct {
	once   sync.Once
	url    string
	err    error
	server *PostgresServer // keeps the local instance and its watchdog pipe reachable
}

// PostgresURL returns the URL of a PostgreSQL server for t: the one named by
// FENCEKIT_POSTGRES_URL; else a throwaway local instance started from the
// server binaries. The local instance is shared by every test of the test
// binary, so tests must keep to their own schema (see Postgres). When
// neither is available, t is skipped, or failed under
// FENCEKIT_REQUIRE_BACKENDS=1.
func PostgresURL(t testing.TB) string {
	t.Helper()
	u, err := SharedPostgresURL()
	if err != nil {
		t.Logf("testkit: no PostgreSQL: %v", err)
		Unavailable(t, "PostgreSQL", postgresHow)
	}
	return u
}

// SharedPostgresURL is PostgresURL for code that runs outside any test,
// such as a TestMain preparing examples: the server of
// FENCEKIT_POSTGRES_URL, else the test binary's shared throwaway instance,
// started now; an error when there is neither.
func SharedPostgresURL() (string, error) {
	if u := envURL(PostgresURLEnv); u != "" {
		return u, nil
	}
	sharedPostgres.once.Do(func() {
		srv, err := startLocalPostgres(nil)
		if err != nil {
			sharedPostgres.err = err
			return
		}
		sharedPostgres.server, sharedPostgres.url = srv, srv.URL()
	})
	return sharedPostgres.url, sharedPostgres.err
}

// Postgres returns a pool on PostgresURL(t) whose connections all use a
// fresh schema of their own (testkit.Namespace) as search_path, so that
// unqualified table names are private to t. When t ends, the pool is closed
// and the schema dropped with everything in it.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return schemaPool(t, PostgresURL(t), false)
}

// PostgresAt is Postgres on the server at url instead of PostgresURL(t).
func PostgresAt(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	return schemaPool(t, url, false)
}

// schemaPool creates a schema on the server at url and returns a pool that
// uses it; both are cleaned up when t ends. With pingAlways the pool checks
// every connection before handing it out, so that it recovers by itself from
// a server restart.
func schemaPool(t testing.TB, url string, pingAlways bool) *pgxpool.Pool {
	t.Helper()
	schema := Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testkit: parse PostgreSQL URL: %v", err)
	}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		t.Fatalf("testkit: connect to PostgreSQL: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testkit: create schema %s: %v", schema, err)
	}

	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	// The schema's name is also the connections' application_name, so that
	// cleanup can find connections a failed test left behind.
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	if pingAlways {
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		dropSchema(t, url, schema)
		t.Fatalf("testkit: pool on PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			// A connection is still acquired (a test failed mid-way);
			// dropSchema terminates it below.
			t.Logf("testkit: pool for schema %s did not close in 5s", schema)
		}
		dropSchema(t, url, schema)
	})
	return pool
}

// dropSchema ends any connection still using schema and drops it.
func dropSchema(t testing.TB, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Logf("testkit: drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(context.Background())
	_, _ = conn.Exec(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
		schema)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Logf("testkit: drop schema %s: %v", schema, err)
	}
}
