package testkit

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestMySQLDatabasePerTest: each test gets a database of its own, and
// unqualified tables land in it; the database is dropped afterwards.
func TestMySQLDatabasePerTest(t *testing.T) {
	ctx := Context(t)
	var names [2]string
	for i := range names {
		t.Run("db", func(t *testing.T) {
			db := MySQL(t)
			if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&names[i]); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(names[i], "fk_") {
				t.Fatalf("DATABASE() = %q, want the test's own fk_ database", names[i])
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (v INT)"); err != nil {
				t.Fatal(err)
			}
		})
	}
	if names[0] == names[1] {
		t.Fatalf("two tests shared database %q", names[0])
	}
	admin := OpenMySQL(t, MySQLConfig(t))
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name IN (?, ?)", names[0], names[1]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d of the tests' databases still exist", n)
	}
}

// TestMySQLServerRestarts: a throwaway server keeps committed rows across
// Stop/Start and Kill/Start, on the same port, and refuses connections
// while stopped.
func TestMySQLServerRestarts(t *testing.T) {
	s := NewMySQLServer(t)
	ctx := Context(t)
	db := OpenMySQL(t, s.Config(t))
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (v INT)"); err != nil {
		t.Fatal(err)
	}
	port := s.Port()
	for i, restart := range []func(){s.Stop, s.Kill} {
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
		restart()
		down, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := db.PingContext(down)
		cancel()
		if err == nil {
			t.Fatal("ping succeeded with the server down")
		}
		s.Start()
		if s.Port() != port {
			t.Fatalf("port %d after restart, was %d", s.Port(), port)
		}
		var n int
		deadline := time.Now().Add(30 * time.Second)
		for {
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // poll interval: pooled connections broke
		}
		if err != nil || n != i+1 {
			t.Fatalf("after restart %d: %d rows, %v; want %d", i, n, err, i+1)
		}
	}
}
