package suite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
)

// MariaDB through database/sql (go-sql-driver/mysql, default options: each
// statement with arguments is a prepare and an execute): the sqldb
// adapter's fenced upsert against a plain upsert, and a Guard-checked
// transaction against the same transaction, at 1 and Workers goroutines.
//
// The server is FENCEKIT_BENCH_MYSQL_URL, default
// root@tcp(127.0.0.1:3306)/test (the development machine's MariaDB); the
// run creates a database of its own there and drops it. When no server
// answers, or the variable is "off", these groups are left out of the run.

// NeedMySQL marks the groups of this file. Setup removes them when there
// is no MySQL server.
const NeedMySQL Need = 100

// sqlDB is the pool of the MySQL groups; nil without a server.
var sqlDB *sql.DB

func init() {
	note := "Plain: INSERT ... ON DUPLICATE KEY UPDATE v = VALUES(v) on (k VARBINARY(1024) PRIMARY KEY, v LONGBLOB). " +
		"Fenced: sqldb Store.Put, the same statement with the fence column, conditional assignments and LAST_INSERT_ID."
	addGroup(Group{ID: "mysql-write-1", Title: "MariaDB (database/sql): fenced upsert (sqldb Store.Put) vs plain upsert, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedMySQL, Note: note})
	addGroup(Group{ID: "mysql-write-32", Title: fmt.Sprintf("MariaDB (database/sql): fenced upsert vs plain upsert, %d goroutines on distinct keys (throughput)", Workers),
		Kind: Throughput, Needs: NeedMySQL})
	txNote := "BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = ?; COMMIT. The guarded one runs sqldb Guard.Check(tx, resource, token) first."
	addGroup(Group{ID: "mysql-tx-1", Title: "MariaDB (database/sql): a transaction with and without Guard.Check, 1 goroutine (latency)",
		Kind: Latency, Needs: NeedMySQL, Note: txNote})
	addGroup(Group{ID: "mysql-tx-32", Title: fmt.Sprintf("MariaDB (database/sql): a transaction with and without Guard.Check, %d goroutines on distinct rows (throughput)", Workers),
		Kind: Throughput, Needs: NeedMySQL})

	addCase(Case{Group: "mysql-write-1", Name: "plain upsert", Baseline: true, Op: func(e *Env) (op, error) { return mysqlPlainPut(e, "lat"), nil }})
	addCase(Case{Group: "mysql-write-1", Name: "sqldb Store.Put", Order: 1, Op: func(e *Env) (op, error) { return mysqlFencedPut(e, "lat"), nil }})
	addCase(Case{Group: "mysql-write-32", Name: "plain upsert", Baseline: true, Run: func(b *testing.B, e *Env) {
		mysqlWorkers(b, e, func(w int) op { return mysqlPlainPut(e, w) })
	}})
	addCase(Case{Group: "mysql-write-32", Name: "sqldb Store.Put", Order: 1, Run: func(b *testing.B, e *Env) {
		mysqlWorkers(b, e, func(w int) op { return mysqlFencedPut(e, w) })
	}})
	addCase(Case{Group: "mysql-tx-1", Name: "plain transaction", Baseline: true, Op: func(e *Env) (op, error) { return mysqlTx(e, 0, false), nil }})
	addCase(Case{Group: "mysql-tx-1", Name: "Guard.Check + transaction", Order: 1, Op: func(e *Env) (op, error) { return mysqlTx(e, 0, true), nil }})
	addCase(Case{Group: "mysql-tx-32", Name: "plain transaction", Baseline: true, Run: func(b *testing.B, e *Env) {
		mysqlWorkers(b, e, func(w int) op { return mysqlTx(e, w, false) })
	}})
	addCase(Case{Group: "mysql-tx-32", Name: "Guard.Check + transaction", Order: 1, Run: func(b *testing.B, e *Env) {
		mysqlWorkers(b, e, func(w int) op { return mysqlTx(e, w, true) })
	}})

	setups = append(setups, setupMySQL)
	cleanups = append(cleanups, cleanupMySQL)
}

// mysqlDBName is this run's database on the MySQL server.
func (e *Env) mysqlDBName() string { return strings.ReplaceAll(e.Prefix, "-", "_") }

func mysqlOptions() *sqldb.Options {
	return &sqldb.Options{StoreTable: sqldb.Identifier{"fk_store"}, LeaseTable: sqldb.Identifier{"fk_leases"}}
}

// setupMySQL connects, creates this run's database and tables, or, without
// a server, removes this file's groups from the run.
func setupMySQL(ctx context.Context, e *Env) error {
	url := os.Getenv("FENCEKIT_BENCH_MYSQL_URL")
	if url == "" {
		url = "root@tcp(127.0.0.1:3306)/test"
	}
	db, err := openMySQLBench(ctx, url, e.mysqlDBName())
	if err != nil {
		if url != "off" {
			e.logf("MySQL groups left out: %v", err)
		}
		dropMySQLGroups()
		return nil
	}
	sqlDB = db
	e.logf("MySQL groups on %s, database %s", url, e.mysqlDBName())
	if err := sqldb.Migrate(ctx, db, sqldb.MySQL, mysqlOptions()); err != nil {
		return err
	}
	for _, s := range []string{
		"CREATE TABLE plain (k VARBINARY(1024) NOT NULL PRIMARY KEY, v LONGBLOB) ENGINE=InnoDB",
		"CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB",
		fmt.Sprintf("INSERT INTO accounts SELECT seq, 0 FROM seq_0_to_%d", Workers),
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("mysql: %s: %w", s, err)
		}
	}
	return nil
}

// openMySQLBench creates database name on the server at url and returns a
// pool on it, large enough that no worker waits for a connection.
func openMySQLBench(ctx context.Context, url, name string) (*sql.DB, error) {
	if url == "off" {
		return nil, fmt.Errorf("FENCEKIT_BENCH_MYSQL_URL=off")
	}
	cfg, err := mysql.ParseDSN(url)
	if err != nil {
		return nil, err
	}
	admin := cfg.Clone()
	admin.DBName = ""
	conn, err := mysql.NewConnector(admin)
	if err != nil {
		return nil, err
	}
	adb := sql.OpenDB(conn)
	defer adb.Close()
	if _, err := adb.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		return nil, err
	}
	cfg.DBName = name
	conn, err = mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2 * Workers)
	db.SetMaxIdleConns(2 * Workers)
	return db, nil
}

func cleanupMySQL(ctx context.Context, e *Env) {
	if sqlDB == nil {
		return
	}
	_, _ = sqlDB.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+e.mysqlDBName()+"`")
	_ = sqlDB.Close()
	sqlDB = nil
}

// dropMySQLGroups removes this file's groups and cases from the run.
func dropMySQLGroups() {
	for id, g := range groups {
		if g.Needs == NeedMySQL {
			delete(groups, id)
		}
	}
	cases = slices.DeleteFunc(cases, func(c Case) bool { return strings.HasPrefix(c.Group, "mysql-") })
}

// changing returns a copy of e.Value whose first bytes next overwrites
// with a counter, so that every write changes its row: InnoDB skips the
// redo log, and the commit its flush, for an update that sets what the row
// holds, which would make the benchmark measure no-op writes.
func changing(e *Env) (value []byte, next func()) {
	value = append([]byte(nil), e.Value...)
	var n uint64
	return value, func() {
		n++
		for i := 0; i < 8; i++ {
			value[i] = 'a' + byte(n>>(4*i))&15
		}
	}
}

func mysqlPlainPut(e *Env, who any) op {
	key := e.Key("mysql-upsert", who)
	value, next := changing(e)
	return func(ctx context.Context) (bool, error) {
		next()
		_, err := sqlDB.ExecContext(ctx, "INSERT INTO plain (k, v) VALUES (?, ?) ON DUPLICATE KEY UPDATE v = VALUES(v)", key, value)
		return true, err
	}
}

func mysqlFencedPut(e *Env, who any) op {
	s := sqldb.NewStore(sqlDB, sqldb.MySQL, mysqlOptions())
	key := e.Key("mysql-upsert", who)
	value, next := changing(e)
	return func(ctx context.Context) (bool, error) {
		next()
		return true, s.Put(ctx, key, 1, value)
	}
}

// mysqlTx is the account transaction on row id, guarded on its own
// resource when guard is set.
func mysqlTx(e *Env, id int, guard bool) op {
	g := sqldb.NewGuard(sqldb.MySQL, mysqlOptions())
	resource := e.Key("mysql-account", id)
	return func(ctx context.Context) (bool, error) {
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
		if guard {
			if err := g.Check(ctx, tx, resource, 1); err != nil {
				return false, err
			}
		}
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", id); err != nil {
			return false, err
		}
		return true, tx.Commit()
	}
}

func mysqlWorkers(b *testing.B, e *Env, newOp func(w int) op) {
	st := runWorkers(b, e, Workers, newOp)
	b.ReportMetric(float64(b.N)/st.Elapsed.Seconds(), "ops/s")
}
