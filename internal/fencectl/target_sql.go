package fencectl

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fencekit/adapters/sqldb"
)

// openMySQL opens a MySQL or MariaDB server through database/sql and
// go-sql-driver/mysql, with the tables of adapters/sqldb.
func openMySQL(ctx context.Context, c *config) (*target, error) {
	if c.mysqlURL == "" {
		return nil, usagef("--backend mysql needs --mysql-url or FENCEKIT_MYSQL_URL")
	}
	cfg, err := mysql.ParseDSN(c.mysqlURL)
	if err != nil {
		return nil, usagef("mysql DSN (user:password@tcp(host:port)/database): %v", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, usagef("mysql DSN: %v", err)
	}
	return openSQL(ctx, c, sql.OpenDB(conn), sqldb.MySQL, "MySQL", cfg.Addr)
}

// openPostgresSQL opens PostgreSQL through database/sql (pgx's driver) and
// adapters/sqldb: the tables are those of adapters/postgres, so this reads
// what a service on sqldb (GORM, sqlx, database/sql) wrote.
func openPostgresSQL(ctx context.Context, c *config) (*target, error) {
	if c.postgresURL == "" {
		return nil, usagef("--backend postgres-sqldb needs --postgres-url or FENCEKIT_POSTGRES_URL")
	}
	cfg, err := pgx.ParseConfig(c.postgresURL)
	if err != nil {
		return nil, usagef("postgres URL: %v", err)
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	return openSQL(ctx, c, stdlib.OpenDB(*cfg), sqldb.PostgreSQL, "PostgreSQL", addr)
}

// openSQL checks that db answers and builds the target on it.
func openSQL(ctx context.Context, c *config, db *sql.DB, d sqldb.Dialect, what, addr string) (*target, error) {
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, &unreachableError{what: what, addr: addr, err: err}
	}
	opts := &sqldb.Options{StoreTable: sqlIdentifier(c.storeTable), LeaseTable: sqlIdentifier(c.leaseTable)}
	b := sqldb.NewBackend(db, d, opts)
	admin := sqldb.NewAdmin(db, d, opts)
	return &target{
		kind:        strings.ToLower(what),
		backend:     b,
		store:       sqldb.NewStore(db, d, opts),
		storeAt:     fmt.Sprintf("table %s (--store-table)", c.storeTable),
		list:        admin.List,
		permitNames: admin.PermitNames,
		waiters:     admin.Waiters,
		bump: func(ctx context.Context, by int64) (bumpResult, error) {
			r, err := admin.Bump(ctx, by)
			return bumpResult{Rows: r.Rows, MaxToken: r.MaxToken}, err
		},
		close: func() { _ = db.Close() },
	}, nil
}

// sqlIdentifier splits "database.table" or "schema.table" at its first
// dot; the adapter checks and quotes the parts.
func sqlIdentifier(s string) sqldb.Identifier {
	if schema, table, ok := strings.Cut(s, "."); ok {
		return sqldb.Identifier{schema, table}
	}
	return sqldb.Identifier{s}
}
