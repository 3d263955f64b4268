package testkit

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPostgresURLConnects(t *testing.T) {
	url := PostgresURL(t)
	ctx := Context(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

func TestPostgresSchemaPerTest(t *testing.T) {
	ctx := Context(t)
	var schemas [2]string
	for i := range schemas {
		t.Run("pool", func(t *testing.T) {
			pool := Postgres(t)
			if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schemas[i]); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(schemas[i], "fk_") {
				t.Fatalf("current_schema() = %q, want the test's own fk_ schema", schemas[i])
			}
			// Unqualified names land in the test's schema, on every
			// connection of the pool.
			if _, err := pool.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
			c1, err := pool.Acquire(ctx) // keep one busy: the next is another connection
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Release()
			c2, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Release()
			if _, err := c2.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
				t.Fatalf("second connection does not see the schema's table: %v", err)
			}
		})
	}
	if schemas[0] == schemas[1] {
		t.Fatalf("two tests shared schema %q", schemas[0])
	}
	conn, err := pgx.Connect(ctx, PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range schemas {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", s).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("schema %s still exists after its test ended", s)
		}
	}
}

func TestPostgresServerLifecycle(t *testing.T) {
	srv := NewPostgresServer(t)
	ctx := Context(t)
	if !strings.Contains(srv.URL(), "127.0.0.1:") {
		t.Fatalf("URL %q is not on loopback", srv.URL())
	}
	pool := srv.Pool(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE kv (k text PRIMARY KEY, v int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO kv VALUES ('a', 1)"); err != nil {
		t.Fatal(err)
	}
	read := func(k string) int {
		t.Helper()
		var v int
		if err := pool.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", k).Scan(&v); err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		return v
	}

	srv.Stop()
	quick, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := pool.Ping(quick); err == nil {
		t.Fatal("ping succeeded on a stopped server")
	}
	cancel()
	srv.Stop() // idempotent

	srv.Start()
	if got := read("a"); got != 1 {
		t.Fatalf("after Stop and Start: a = %d, want 1", got)
	}

	// A commit made with synchronous_commit=on is flushed to the WAL, so it
	// survives a crash even though the server runs with it off.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO kv VALUES ('b', 2)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Kill() // idempotent
	srv.Start()
	srv.Start() // idempotent
	if got := read("b"); got != 2 {
		t.Fatalf("after Kill and Start: b = %d, want 2", got)
	}
}

func TestPostgresServerCleanup(t *testing.T) {
	var dir string
	t.Run("server", func(t *testing.T) {
		srv := NewPostgresServer(t)
		dir = srv.dir
		if _, err := os.Stat(dir); err != nil {
			t.Fatal(err)
		}
	})
	if dir == "" {
		t.Skip("no server")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("server directory %s still exists after its test: %v", dir, err)
	}
}

func TestPostgresBinDir(t *testing.T) {
	dir, err := postgresBinDir()
	if err != nil {
		t.Skipf("no binaries: %v", err)
	}
	t.Logf("PostgreSQL binaries in %s", dir)
	if pathVersion("/usr/lib/postgresql/15/bin") != 15 || pathVersion("/x/y") != 0 {
		t.Fatal("pathVersion")
	}
}
