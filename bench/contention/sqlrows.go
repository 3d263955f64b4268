package contention

import (
	"context"
	"database/sql"
	"errors"
	"hash/fnv"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// statementCounter counts the statements a pgx pool sends (a QueryTracer),
// the server work of the PostgreSQL rows, in all and by statement (its
// first words, see statementLabel).
type statementCounter struct {
	n  atomic.Int64
	mu sync.Mutex
	by map[string]int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	label := statementLabel(d.SQL)
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]int64{}
	}
	c.by[label]++
	c.mu.Unlock()
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) work(context.Context) (int64, error) { return c.n.Load(), nil }

func (c *statementCounter) workBy(context.Context) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.by), nil
}

// statementLabel names a statement by its first words, whitespace folded:
// enough to tell the adapter's statements apart.
func statementLabel(sql string) string {
	words := strings.Fields(sql)
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		words = words[1:] // a leading comment word
	}
	label := strings.Join(words[:min(len(words), 6)], " ")
	if len(label) > 60 {
		label = label[:60]
	}
	return "«" + label + "»"
}

// countedPool opens a pool on url whose statements count.
func countedPool(ctx context.Context, url string) (*pgxpool.Pool, *statementCounter, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 48
	c := &statementCounter{}
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	return pool, c, err
}

// packetCounter counts the packets a MySQL client writes: with
// interpolateParams=true one per statement, the server work of the MariaDB
// rows.
type packetCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c packetCounter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// countedMySQL opens dsn with interpolated parameters, counting statements.
func countedMySQL(dsn string) (*sql.DB, func(context.Context) (int64, error), error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.InterpolateParams = true
	n := &atomic.Int64{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return packetCounter{Conn: c, n: n}, nil
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(48)
	db.SetMaxIdleConns(48)
	return db, func(context.Context) (int64, error) { return n.Load(), nil }, nil
}

// fencekitRow is a row of fencekit on b, shared by the workers, polling or
// queued.
func fencekitRow(name string, b driver.Backend, polling bool, work func(context.Context) (int64, error)) Row {
	return Row{Name: name, Work: work, New: func(lockName string, _ int) (Locker, error) {
		c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{Polling: polling}})
		return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.Acquire(ctx, lockName, TTL)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}), nil
	}}
}

// advisoryKey maps a lock name to an advisory lock key.
func advisoryKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// PostgresRows returns fencekit on PostgreSQL (adapters/postgres over pgx,
// polling and queued) and pg_advisory_lock as its peer, on the server at
// url. close releases the pools.
func PostgresRows(ctx context.Context, url string) (rows []Row, close func(), err error) {
	pool, counter, err := countedPool(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		pool.Close()
		return nil, nil, err
	}
	b := postgres.NewBackend(pool, nil)
	advisory := Row{Name: "pg_advisory_lock (PostgreSQL's own queue)", Work: counter.work, New: func(lockName string, _ int) (Locker, error) {
		key := advisoryKey(lockName)
		return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
			// A session lock: the worker keeps its connection while it
			// holds the lock.
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				conn.Release()
				return nil, err
			}
			return func(ctx context.Context) error {
				defer conn.Release()
				_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
				return err
			}, nil
		}), nil
	}}
	rows = []Row{
		fencekitRow("fencekit PostgreSQL, polling (before)", b, true, counter.work),
		fencekitRow("fencekit PostgreSQL, queued (after)", b, false, counter.work),
		advisory,
	}
	for i := range rows {
		rows[i].WorkBy = counter.workBy
	}
	return rows, pool.Close, nil
}

// MariaDBRows returns fencekit on MariaDB (adapters/sqldb over
// go-sql-driver/mysql, polling and queued, on tables of its own) and
// GET_LOCK as its peer, on the server at dsn.
func MariaDBRows(ctx context.Context, dsn string) (rows []Row, close func(), err error) {
	db, work, err := countedMySQL(dsn)
	if err != nil {
		return nil, nil, err
	}
	opts := &sqldb.Options{StoreTable: sqldb.Identifier{"fkbench_contention_store"}, LeaseTable: sqldb.Identifier{"fkbench_contention_leases"}}
	if err := sqldb.Migrate(ctx, db, sqldb.MySQL, opts); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	b := sqldb.NewBackend(db, sqldb.MySQL, opts)
	getLock := Row{Name: "GET_LOCK (MariaDB's own queue)", Work: work, New: func(lockName string, _ int) (Locker, error) {
		return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
			conn, err := db.Conn(ctx)
			if err != nil {
				return nil, err
			}
			var got sql.NullInt64
			if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", lockName).Scan(&got); err != nil || got.Int64 != 1 {
				_ = conn.Close()
				if err == nil {
					err = errors.New("GET_LOCK timed out")
				}
				return nil, err
			}
			return func(ctx context.Context) error {
				defer conn.Close()
				_, err := conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", lockName)
				return err
			}, nil
		}), nil
	}}
	return []Row{
		fencekitRow("fencekit MariaDB (sqldb), polling (before)", b, true, work),
		fencekitRow("fencekit MariaDB (sqldb), queued (after)", b, false, work),
		getLock,
	}, func() { _ = db.Close() }, nil
}
