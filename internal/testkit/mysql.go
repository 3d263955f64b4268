package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Environment variables that choose the MySQL or MariaDB server for tests.
const (
	// MySQLURLEnv names a running server to use (step 1), as a
	// go-sql-driver/mysql DSN: root@tcp(127.0.0.1:3306)/test.
	MySQLURLEnv = "FENCEKIT_MYSQL_URL"
)

const mysqlHow = "set FENCEKIT_MYSQL_URL (a go-sql-driver/mysql DSN such as root@tcp(127.0.0.1:3306)/test) or install the MariaDB server (mariadbd, mariadb-install-db)"

// sharedMySQL is the server MySQLURL started without an environment URL:
// one per test binary, removed by its watchdog when the binary exits.
var sharedMySQL struct {
	once   sync.Once
	url    string
	err    error
	server *MySQLServer
}

// MySQLURL returns the DSN (go-sql-driver/mysql syntax) of a MySQL or
// MariaDB server for t: the one named by FENCEKIT_MYSQL_URL; else a
// throwaway local mariadbd started from the server binaries and shared by
// every test of the test binary, so tests must keep to their own database
// (see MySQL). When neither is available, t is skipped, or failed under
// FENCEKIT_REQUIRE_BACKENDS=1.
//
// As for Redis and PostgreSQL, the Docker path (a MariaDB container through
// testcontainers-go) lives in the separate module internal/containers
// (containers.MySQLURL), whose tests pass its DSN to MySQLConfigAt: testkit
// stays free of testcontainers and Docker's client.
func MySQLURL(t testing.TB) string {
	t.Helper()
	u, err := SharedMySQLURL()
	if err != nil {
		t.Logf("testkit: no MySQL: %v", err)
		Unavailable(t, "MySQL/MariaDB", mysqlHow)
	}
	return u
}

// SharedMySQLURL is MySQLURL for code that runs outside any test, such as
// a TestMain preparing examples: the server of FENCEKIT_MYSQL_URL, else the
// test binary's shared throwaway mariadbd, started now; an error when there
// is neither.
func SharedMySQLURL() (string, error) {
	if u := envURL(MySQLURLEnv); u != "" {
		return u, nil
	}
	sharedMySQL.once.Do(func() {
		srv, err := startLocalMySQL(nil)
		if err != nil {
			sharedMySQL.err = err
			return
		}
		sharedMySQL.server, sharedMySQL.url = srv, srv.DSN()
	})
	return sharedMySQL.url, sharedMySQL.err
}

// MySQLConfig returns the driver configuration of a fresh database of its
// own (testkit.Namespace) on MySQLURL(t), dropped when t ends. Tests that
// need driver options (a dial function, clientFoundRows) set them on the
// copy they get and open it with mysql.NewConnector.
func MySQLConfig(t testing.TB) *mysql.Config {
	t.Helper()
	return mysqlDatabase(t, MySQLURL(t))
}

// MySQLConfigAt is MySQLConfig on the server at dsn instead of
// MySQLURL(t).
func MySQLConfigAt(t testing.TB, dsn string) *mysql.Config {
	t.Helper()
	return mysqlDatabase(t, dsn)
}

// MySQL returns a *sql.DB with go-sql-driver/mysql's default options on a
// fresh database of its own on MySQLURL(t), so that unqualified table
// names are private to t. When t ends, the pool is closed and the database
// dropped with everything in it.
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	return OpenMySQL(t, MySQLConfig(t))
}

// OpenMySQL opens cfg and closes the pool when t ends.
func OpenMySQL(t testing.TB, cfg *mysql.Config) *sql.DB {
	t.Helper()
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("testkit: MySQL connector: %v", err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mysqlDatabase creates a database on the server at dsn and returns a
// configuration that uses it; the database is dropped when t ends.
func mysqlDatabase(t testing.TB, dsn string) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("testkit: parse %s: %v", MySQLURLEnv, err)
	}
	name := Namespace(t)
	admin := cfg.Clone()
	admin.DBName = ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mysqlExec(ctx, admin, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("testkit: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mysqlExec(ctx, admin, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("testkit: drop database %s: %v", name, err)
		}
	})
	out := cfg.Clone()
	out.DBName = name
	return out
}

// mysqlExec runs one statement on a connection of its own.
func mysqlExec(ctx context.Context, cfg *mysql.Config, stmt string) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}
