//go:build unix

package faulttest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Waiters under faults on the SQL backends (issue 22), as waiters_test.go
// does for memory and Redis: a waiter process killed with SIGKILL, a
// waiter whose connections are cut, and a server restart with waiters in
// line, on adapters/postgres (pgx, woken by NOTIFY) and on adapters/sqldb
// on MariaDB and on PostgreSQL (waiters that re-check). The places live
// in the queue table, so a dead waiter's place stays until its place TTL
// runs out; the waiter behind it must be served within waiterBound, tokens
// must rise and no two holders overlap.

func init() {
	workers["sql-queue-wait"] = sqlQueueWaitWorker
}

// sqlRig is one SQL backend with queued waiting, set up for these
// scenarios: a direct path, a path through a proxy that can cut it, and
// what a worker process needs to reach the same tables.
type sqlRig struct {
	direct, faulty driver.Backend
	proxy          *faultproxy.Proxy
	child          map[string]string
}

// sqlQueueRigs are the SQL backends that queue waiters.
var sqlQueueRigs = []struct {
	name string
	make func(t *testing.T) *sqlRig
}{
	{"postgres", func(t *testing.T) *sqlRig { return pgQueueRig(t, false) }},
	{"sqldb-postgres", func(t *testing.T) *sqlRig { return pgQueueRig(t, true) }},
	{"sqldb-mysql", mysqlQueueRig},
}

// eachSQLQueueRig runs f as a subtest per SQL backend that queues.
func eachSQLQueueRig(t *testing.T, f func(t *testing.T, r *sqlRig)) {
	for _, b := range sqlQueueRigs {
		t.Run(b.name, func(t *testing.T) { f(t, b.make(t)) })
	}
}

// pgQueueRig is PostgreSQL on a schema of t's own: through adapters/sqldb
// (pgx's database/sql driver) when viaSQLDB, else through adapters/postgres.
func pgQueueRig(t *testing.T, viaSQLDB bool) *sqlRig {
	direct := testkit.Postgres(t)
	ctx := testCtx(t)
	cfg := direct.Config()
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p := testkit.NewProxy(t, target)
	host, port, _ := net.SplitHostPort(p.Addr())
	pn, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(pn)
	cfg.ConnConfig.Fallbacks = nil
	cfg.MaxConns = 4
	faulty, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(faulty.Close)
	r := &sqlRig{proxy: p, child: map[string]string{
		"backend": "postgres",
		"url":     direct.Config().ConnString(),
		"schema":  cfg.ConnConfig.RuntimeParams["search_path"],
	}}
	if viaSQLDB {
		db, fdb := sqlDB(t, direct), sqlDB(t, faulty)
		if err := sqldb.Migrate(ctx, db, sqldb.PostgreSQL, nil); err != nil {
			t.Fatal(err)
		}
		r.direct, r.faulty = sqldb.NewBackend(db, sqldb.PostgreSQL, nil), sqldb.NewBackend(fdb, sqldb.PostgreSQL, nil)
		r.child["backend"] = "sqldb-postgres"
		return r
	}
	if err := postgres.Migrate(ctx, direct, nil); err != nil {
		t.Fatal(err)
	}
	r.direct, r.faulty = postgres.NewBackend(direct, nil), postgres.NewBackend(faulty, nil)
	return r
}

// sqlDB is pool seen through database/sql (pgx's driver), closed when t
// ends.
func sqlDB(t *testing.T, pool *pgxpool.Pool) *sql.DB {
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// mysqlQueueRig is adapters/sqldb on a MariaDB database of t's own.
func mysqlQueueRig(t *testing.T) *sqlRig {
	cfg := testkit.MySQLConfig(t)
	db := testkit.OpenMySQL(t, cfg)
	if err := sqldb.Migrate(testCtx(t), db, sqldb.MySQL, nil); err != nil {
		t.Fatal(err)
	}
	p := testkit.NewProxy(t, cfg.Addr)
	fcfg := cfg.Clone()
	fcfg.Addr = p.Addr()
	return &sqlRig{
		direct: sqldb.NewBackend(db, sqldb.MySQL, nil),
		faulty: sqldb.NewBackend(testkit.OpenMySQL(t, fcfg), sqldb.MySQL, nil),
		proxy:  p,
		child:  map[string]string{"backend": "sqldb-mysql", "url": cfg.FormatDSN()},
	}
}

// sqlQueueWaitWorker is queueWaitWorker on an SQL backend: it waits in line
// (Client.Acquire, place TTL from FENCEKIT_FAULTTEST_PLACE), says "queued"
// once its first attempt was refused and, should it ever get the lock,
// "acquired <token>".
func sqlQueueWaitWorker() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	place, err := time.ParseDuration(os.Getenv("FENCEKIT_FAULTTEST_PLACE"))
	if err != nil {
		return workerFail("place: %v", err)
	}
	url := os.Getenv("FENCEKIT_FAULTTEST_URL")
	var b driver.Backend
	switch kind := os.Getenv("FENCEKIT_FAULTTEST_BACKEND"); kind {
	case "postgres", "sqldb-postgres":
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return workerFail("%v", err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv("FENCEKIT_FAULTTEST_SCHEMA")
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return workerFail("%v", err)
		}
		defer pool.Close()
		b = postgres.NewBackend(pool, nil)
		if kind == "sqldb-postgres" {
			db := stdlib.OpenDBFromPool(pool)
			defer db.Close()
			b = sqldb.NewBackend(db, sqldb.PostgreSQL, nil)
		}
	case "sqldb-mysql":
		cfg, err := mysql.ParseDSN(url)
		if err != nil {
			return workerFail("%v", err)
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return workerFail("%v", err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		b = sqldb.NewBackend(db, sqldb.MySQL, nil)
	default:
		return workerFail("unknown backend %q", kind)
	}
	var once sync.Once
	client := lock.New(b, &lock.Options{
		Queue: lock.QueueOptions{PlaceTTL: place},
		Observer: &lock.Observer{Retrying: func(lock.Event) {
			once.Do(func() { fmt.Println("queued") })
		}},
	})
	l, err := client.Acquire(ctx, os.Getenv("FENCEKIT_FAULTTEST_LOCK"), time.Minute)
	if err != nil {
		return workerFail("acquire: %v", err)
	}
	fmt.Printf("acquired %d\n", l.Token())
	<-ctx.Done()
	return 0
}

// TestSQLWaiterKilled: the first waiter in line is a worker process killed
// with SIGKILL (its place stays in the queue table, and on adapters/postgres
// the holder's release notifies the dead waiter). The waiter behind it is
// served within the place TTL bound of the kill, with a greater token.
func TestSQLWaiterKilled(t *testing.T) {
	eachSQLQueueRig(t, func(t *testing.T, r *sqlRig) {
		ctx := testCtx(t)
		name := unique(t, "lock")
		h := newOwner(t)
		first, err := acquireLock(ctx, r.direct, name, h, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		w := startWorker(t, "sql-queue-wait", map[string]string{
			"FENCEKIT_FAULTTEST_BACKEND": r.child["backend"],
			"FENCEKIT_FAULTTEST_URL":     r.child["url"],
			"FENCEKIT_FAULTTEST_SCHEMA":  r.child["schema"],
			"FENCEKIT_FAULTTEST_LOCK":    name,
			"FENCEKIT_FAULTTEST_PLACE":   waiterPlace.String(),
		})
		if got := w.next("queued"); got != "queued" {
			t.Fatalf("worker said %q; want queued; stderr:\n%s", got, w.stderr.String())
		}
		var hs holds
		next := startQueuedWaiter(t, ctx, r.direct, name, "the waiter behind the dead one", &hs)
		if err := w.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = w.cmd.Wait()
		killed := time.Now()
		for l := range w.lines {
			t.Errorf("the killed waiter said %q", l)
		}
		if err := releaseLock(ctx, r.direct, name, h); err != nil {
			t.Fatal(err)
		}
		next.servedWithin(t, killed, waiterBound, "the first waiter was killed")
		hs.check(t, first)
	})
}

// TestSQLWaiterConnectionCut: the first waiter in line is cut off from the
// server (every connection through the proxy broken, the listening one of
// adapters/postgres included, and new ones refused), then the holder
// releases. The waiter behind it is served within the place TTL bound, the
// cut-off one gets nothing while cut, and tokens rise.
func TestSQLWaiterConnectionCut(t *testing.T) {
	eachSQLQueueRig(t, func(t *testing.T, r *sqlRig) {
		ctx := testCtx(t)
		name := unique(t, "lock")
		h := newOwner(t)
		first, err := acquireLock(ctx, r.direct, name, h, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var hs holds
		cutOff := startQueuedWaiter(t, ctx, r.faulty, name, "the cut-off waiter", &hs)
		next := startQueuedWaiter(t, ctx, r.direct, name, "the waiter behind it", &hs)
		// New connections are refused; CutAll also cuts one the proxy
		// accepted but had not yet connected to the server (a pool's new
		// connection, the waker's listening one).
		r.proxy.RefuseNew(true)
		r.proxy.CutAll()
		defer r.proxy.Heal()
		cut := time.Now()
		if err := releaseLock(ctx, r.direct, name, h); err != nil {
			t.Fatal(err)
		}
		next.servedWithin(t, cut, waiterBound, "the first waiter was cut off")
		cutOff.cancel()
		<-cutOff.done
		if at := cutOff.served.Load(); at != nil {
			t.Errorf("the cut-off waiter was served while cut off, %v after the cut", at.Sub(cut))
		}
		hs.check(t, first)
	})
}

// TestSQLWaitersServerRestart: the server (a throwaway one) restarts while
// three waiters are in line behind a holder. The lease table and the queue
// table survive it; the waiters, failing transiently while it is down, keep
// or retake their places. Once the holder's release gets through, the
// first of them is served within the place TTL bound, and all of them one
// at a time with tokens above the holder's. adapters/postgres has the same
// scenario as TestQueueSurvivesServerRestart.
func TestSQLWaitersServerRestart(t *testing.T) {
	servers := []struct {
		name string
		open func(t *testing.T) (b driver.Backend, restart func())
	}{
		{"sqldb-postgres", func(t *testing.T) (driver.Backend, func()) {
			srv := testkit.NewPostgresServer(t)
			db := sqlDB(t, srv.Pool(t))
			if err := sqldb.Migrate(testCtx(t), db, sqldb.PostgreSQL, nil); err != nil {
				t.Fatal(err)
			}
			return sqldb.NewBackend(db, sqldb.PostgreSQL, nil), func() { srv.Stop(); srv.Start() }
		}},
		{"sqldb-mysql", func(t *testing.T) (driver.Backend, func()) {
			srv := testkit.NewMySQLServer(t)
			db := testkit.OpenMySQL(t, srv.Config(t))
			if err := sqldb.Migrate(testCtx(t), db, sqldb.MySQL, nil); err != nil {
				t.Fatal(err)
			}
			return sqldb.NewBackend(db, sqldb.MySQL, nil), func() { srv.Stop(); srv.Start() }
		}},
	}
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			b, restart := s.open(t)
			ctx := testCtx(t)
			name := unique(t, "lock")
			h := newOwner(t)
			first, err := acquireLock(ctx, b, name, h, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var hs holds
			ws := make([]*queuedWaiter, 3)
			for i := range ws {
				ws[i] = startQueuedWaiter(t, ctx, b, name, fmt.Sprintf("waiter %d", i+1), &hs)
			}
			restart()
			// Released through the pool (its connections were ended):
			// retried until the server answers.
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := releaseLock(ctx, b, name, h)
				if err == nil {
					break
				}
				if !driver.Retryable(err) || time.Now().After(deadline) {
					t.Fatalf("Release after the restart: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			released := time.Now()
			wait := time.After(waiterBound + 20*time.Second)
			var firstServed time.Time
			for _, w := range ws {
				select {
				case <-w.done:
				case <-wait:
					t.Fatalf("%s not served within %v of the release", w.who, waiterBound+20*time.Second)
				}
				at := w.served.Load()
				if at == nil {
					t.Fatalf("%s: %v", w.who, w.err)
				}
				if firstServed.IsZero() || at.Before(firstServed) {
					firstServed = *at
				}
			}
			if d := firstServed.Sub(released); d > waiterBound {
				t.Errorf("the first waiter served %v after the release; want within %v", d, waiterBound)
			} else {
				t.Logf("the first waiter served %v after the release (bound %v)", d, waiterBound)
			}
			hs.check(t, first)
		})
	}
}
