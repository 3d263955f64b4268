package servers_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/servers"
	"github.com/fencekit/fencekit/internal/testkit"
)

func unavailable(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, servers.ErrNoBinary) {
		testkit.Unavailable(t, "server binaries", err.Error())
	}
	t.Fatal(err)
}

// A commit PostgreSQL acknowledged survives an immediate stop: Start runs
// crash recovery on the same port and data directory.
func TestPostgresImmediateStopKeepsCommits(t *testing.T) {
	pg, err := servers.StartPostgres()
	if err != nil {
		unavailable(t, err)
	}
	defer pg.Close()
	ctx := testkit.Context(t)
	query := func(sql string, args ...any) int64 {
		t.Helper()
		conn, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int64
		if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	query("SELECT count(*) FROM (SELECT 1) s") // the server answers
	func() {
		conn, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE TABLE t (n int)"); err != nil {
			t.Fatal(err)
		}
	}()
	for i := int64(1); i <= 2; i++ {
		query("INSERT INTO t VALUES ($1) RETURNING n", i)
		start := time.Now()
		if err := pg.StopImmediate(); err != nil {
			t.Fatal(err)
		}
		if err := pg.Start(); err != nil {
			t.Fatal(err)
		}
		t.Logf("stop and crash recovery took %v", time.Since(start))
		if got := query("SELECT count(*) FROM t"); got != i {
			t.Fatalf("after immediate stop %d: %d rows, want %d", i, got, i)
		}
	}
}

// Kill then Start brings redis-server back on the same address, empty.
func TestRedisKillRestartsEmpty(t *testing.T) {
	r, err := servers.StartRedis()
	if err != nil {
		unavailable(t, err)
	}
	defer r.Close()
	ctx := testkit.Context(t)
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart: EXISTS k = %d, %v; want 0 (no persistence)", n, err)
	}
}
