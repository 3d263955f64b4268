package lab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

var mysqlURL = flag.String("mysql-url", "root@tcp(127.0.0.1:3306)/test",
	"MySQL or MariaDB DSN (go-sql-driver/mysql syntax) for -backend mysql; the run uses a database of its own and drops it afterwards")

func init() {
	RegisterBackend("mysql", func(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
		o, err := openMySQL(ctx, *mysqlURL, "")
		if err != nil {
			return nil, nil, nil, err
		}
		return o.backend, o.store, o.close, nil
	})
	RegisterProxied("mysql", ProxiedBackend{
		Target: func() (string, error) {
			cfg, err := mysql.ParseDSN(*mysqlURL)
			if err != nil {
				return "", fmt.Errorf("mysql: %w", err)
			}
			if cfg.Net != "tcp" {
				return "", fmt.Errorf("-faults needs the mysql server over tcp, not %q", cfg.Net)
			}
			return cfg.Addr, nil
		},
		Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
			o, err := openMySQL(ctx, *mysqlURL, proxyAddr)
			if err != nil {
				return nil, nil, nil, err
			}
			return o.backend, o.store, o.close, nil
		},
	})
}

// openMySQL creates a database for this run (fencelab_ and random hex) and
// fencekit's tables in it over direct connections to dsn's server, and
// returns the sqldb Backend and Store on a pool that connects to proxyAddr
// instead when it is set (the chaos run's fault proxy). go-sql-driver/mysql
// keeps its default options. The close function closes the pool and drops
// the database, directly.
func openMySQL(ctx context.Context, dsn, proxyAddr string) (opened, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return opened{}, fmt.Errorf("mysql: %w", err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return opened{}, err
	}
	name := "fencelab_" + hex.EncodeToString(b[:])
	admin := cfg.Clone()
	admin.DBName = ""
	conn, err := mysql.NewConnector(admin)
	if err != nil {
		return opened{}, fmt.Errorf("mysql: %w", err)
	}
	direct := sql.OpenDB(conn)
	if _, err := direct.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		_ = direct.Close()
		return opened{}, fmt.Errorf("mysql: create database: %w", err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := direct.ExecContext(dctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: drop database %s: %v\n", name, err)
		}
		_ = direct.Close()
	}
	tables := &sqldb.Options{
		StoreTable: sqldb.Identifier{name, sqldb.DefaultStoreTable},
		LeaseTable: sqldb.Identifier{name, sqldb.DefaultLeaseTable},
	}
	if err := sqldb.Migrate(ctx, direct, sqldb.MySQL, tables); err != nil {
		drop()
		return opened{}, fmt.Errorf("mysql: migrate: %w", err)
	}
	pc := cfg.Clone()
	pc.DBName = name
	if proxyAddr != "" {
		pc.Addr = proxyAddr
	}
	pconn, err := mysql.NewConnector(pc)
	if err != nil {
		drop()
		return opened{}, fmt.Errorf("mysql: %w", err)
	}
	pool := sql.OpenDB(pconn)
	return opened{
		backend: sqldb.NewBackend(pool, sqldb.MySQL, nil),
		store:   sqldb.NewStore(pool, sqldb.MySQL, nil),
		close:   func() { _ = pool.Close(); drop() },
	}, nil
}
