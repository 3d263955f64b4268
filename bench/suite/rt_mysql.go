package suite

import (
	"context"
	"database/sql"
	"net"
	"os"

	"github.com/go-sql-driver/mysql"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/lock"
)

// The lock shapes on MariaDB through the sqldb adapter, counted as the
// Redis and PostgreSQL ones are (addShapeRT), next to the single-name lock
// on the same server. The counted pool interpolates parameters, so that
// every statement is one round trip and the statements column is the
// round trips (go-sql-driver's default would prepare and execute each
// statement with arguments: two).
func init() {
	fk := func(r *RTEnv) *lock.Client {
		return lock.New(sqldb.NewBackend(r.MySQL, sqldb.MySQL, mysqlOptions()), nil)
	}
	addShapeRT("MariaDB", "mylock", fk)
}

// openMySQLCounted returns a pool of one connection on this run's MySQL
// database whose traffic c counts, or nil when the run has no MySQL.
func openMySQLCounted(e *Env, c *Counter) (*sql.DB, error) {
	if sqlDB == nil {
		return nil, nil
	}
	url := os.Getenv("FENCEKIT_BENCH_MYSQL_URL")
	if url == "" {
		url = "root@tcp(127.0.0.1:3306)/test"
	}
	cfg, err := mysql.ParseDSN(url)
	if err != nil {
		return nil, err
	}
	cfg.DBName = e.mysqlDBName()
	cfg.InterpolateParams = true
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return c.dial(ctx, network, addr)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	return db, nil
}
