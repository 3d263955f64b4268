package sqlpermits

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

const (
	workers = 24 // goroutines, each an owner of its own
	names   = 8  // permit names; worker w uses name w % names
	limit   = 2  // permits per name
)

// BenchmarkPermitManyNames: b.N acquire attempts, shared by 24 goroutines
// on 8 semaphores of 2 permits each; an admitted one releases its permit
// at once, so that every attempt of an owner writes a new owner row (the
// insert that met another name's gap lock before the fix). Metrics:
// acquisitions/s (permits granted per second of the run), held/op (share
// refused with ErrHeld), errors (attempts that got anything else; the
// first is logged), errors/op, and server-deadlocks (the deadlocks the
// server resolved during the run, those run again inside the call
// included; see serverDeadlocks).
func BenchmarkPermitManyNames(b *testing.B) {
	ctx := context.Background()
	db := openDB(b)
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	opts := &sqldb.Options{StoreTable: sqldb.Identifier{"fk_store"}, LeaseTable: sqldb.Identifier{"fk_leases"}}
	if err := sqldb.Migrate(ctx, db, sqldb.MySQL, opts); err != nil {
		b.Fatal(err)
	}
	var be driver.Backend = sqldb.NewBackend(db, sqldb.MySQL, opts)
	owners := make([]string, workers)
	for w := range owners {
		o, err := lock.NewOwner()
		if err != nil {
			b.Fatal(err)
		}
		owners[w] = o
	}
	var (
		left                     atomic.Int64
		acquired, held, failures atomic.Int64
		firstErr                 atomic.Pointer[error]
		wg                       sync.WaitGroup
	)
	left.Store(int64(b.N))
	deadlocks := serverDeadlocks(b, db)
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		name, owner := fmt.Sprintf("many-%d", w%names), owners[w]
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				_, err := be.Acquire(ctx, driver.Request{Name: name, Owner: owner, Kind: driver.Semaphore, Limit: limit, TTL: time.Minute})
				switch {
				case err == nil:
					acquired.Add(1)
					err = be.Release(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Semaphore})
				case errors.Is(err, driver.ErrHeld):
					held.Add(1)
					err = nil
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	deadlocks = serverDeadlocks(b, db) - deadlocks
	if p := firstErr.Load(); p != nil {
		b.Logf("first of %d errors: %v", failures.Load(), *p)
	}
	b.ReportMetric(float64(acquired.Load())/elapsed.Seconds(), "acquisitions/s")
	b.ReportMetric(float64(held.Load())/float64(b.N), "held/op")
	b.ReportMetric(float64(failures.Load()), "errors")
	b.ReportMetric(float64(failures.Load())/float64(b.N), "errors/op")
	b.ReportMetric(float64(deadlocks), "server-deadlocks")
}

// serverDeadlocks returns the server's count of deadlocks InnoDB resolved
// (Innodb_deadlocks), those the adapter ran again within the call included.
// It is the whole server's: other clients' deadlocks during the run count
// too.
func serverDeadlocks(b *testing.B, db *sql.DB) int64 {
	var (
		name string
		n    int64
	)
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}

// openDB creates a database of the benchmark's own on the server and
// returns a pool on it, dropped at the end; it skips b without a server.
func openDB(b *testing.B) *sql.DB {
	url := os.Getenv("FENCEKIT_BENCH_MYSQL_URL")
	switch url {
	case "off":
		b.Skip("FENCEKIT_BENCH_MYSQL_URL=off")
	case "":
		url = "root@tcp(127.0.0.1:3306)/test"
	}
	cfg, err := mysql.ParseDSN(url)
	if err != nil {
		b.Fatal(err)
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "fk_sqlpermits_" + hex.EncodeToString(r[:])
	admin := cfg.Clone()
	admin.DBName = ""
	conn, err := mysql.NewConnector(admin)
	if err != nil {
		b.Fatal(err)
	}
	adb := sql.OpenDB(conn)
	b.Cleanup(func() { _ = adb.Close() })
	if _, err := adb.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		b.Skipf("no MySQL server at %s: %v", url, err)
	}
	b.Cleanup(func() {
		if _, err := adb.Exec("DROP DATABASE `" + name + "`"); err != nil {
			b.Logf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	conn, err = mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(conn)
	b.Cleanup(func() { _ = db.Close() })
	return db
}
