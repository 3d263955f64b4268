package sqldb_test

import (
	"context"
	"database/sql"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// server is one configuration the tests run on: a dialect, and how to open
// a *sql.DB on a database of the test's own (optionally through dial).
type server struct {
	name string
	d    sqldb.Dialect
	addr string // host:port, for the fault kits
	open func(t testing.TB, dial faultproxy.DialFunc) *sql.DB
}

// servers returns the configurations every conformance test runs on:
// MariaDB (FENCEKIT_MYSQL_URL) with go-sql-driver/mysql's defaults and with
// clientFoundRows=true, and PostgreSQL through pgx's database/sql driver
// and through lib/pq, each with its defaults.
func servers(t *testing.T) []server {
	return []server{mysqlServer(t, "mysql", nil), mysqlServer(t, "mysql-foundrows", func(c *mysql.Config) { c.ClientFoundRows = true }), pgServer(t), pqServer(t)}
}

// mysqlServer opens databases on a fresh database of t's, created on first
// use, with cfg changed by mutate.
func mysqlServer(t *testing.T, name string, mutate func(*mysql.Config)) server {
	var cfg *mysql.Config
	get := func(tb testing.TB) *mysql.Config {
		if cfg == nil {
			cfg = testkit.MySQLConfig(t)
		}
		c := cfg.Clone()
		if mutate != nil {
			mutate(c)
		}
		return c
	}
	s := server{name: name, d: sqldb.MySQL}
	s.open = func(tb testing.TB, dial faultproxy.DialFunc) *sql.DB {
		c := get(tb)
		if dial != nil {
			c.DialFunc = dial
		}
		return testkit.OpenMySQL(tb, c)
	}
	return s
}

// pgServer opens pools of pgx's database/sql driver on a schema of t's own.
func pgServer(t *testing.T) server {
	var dsn string
	s := server{name: "pgx-stdlib", d: sqldb.PostgreSQL}
	s.open = func(tb testing.TB, dial faultproxy.DialFunc) *sql.DB {
		if dsn == "" {
			dsn = pgSchema(t)
		}
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		if dial != nil {
			cfg.DialFunc = dial
		}
		db := stdlib.OpenDB(*cfg)
		tb.Cleanup(func() { _ = db.Close() })
		return db
	}
	return s
}

// pqServer opens pools of lib/pq on a schema of t's own.
func pqServer(t *testing.T) server {
	var dsn string
	s := server{name: "lib-pq", d: sqldb.PostgreSQL}
	s.open = func(tb testing.TB, dial faultproxy.DialFunc) *sql.DB {
		if dsn == "" {
			dsn = pgSchema(t)
		}
		c, err := pq.NewConnector(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		if dial != nil {
			c.Dialer(pqDialer(dial))
		}
		db := sql.OpenDB(c)
		tb.Cleanup(func() { _ = db.Close() })
		return db
	}
	return s
}

// pqDialer adapts a fault kit's dial function to lib/pq's Dialer, which
// uses DialContext when it has one.
type pqDialer faultproxy.DialFunc

func (d pqDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d(ctx, network, addr)
}

func (d pqDialer) Dial(network, addr string) (net.Conn, error) {
	return d(context.Background(), network, addr)
}

func (d pqDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d(ctx, network, addr)
}

// pgSchema creates a schema on the PostgreSQL server of testkit, dropped
// when t ends, and returns a URL whose connections use it as search_path.
func pgSchema(t testing.TB) string {
	t.Helper()
	base := testkit.PostgresURL(t)
	ns := testkit.Namespace(t)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", ns)
		if _, err := admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+ns+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", ns, err)
		}
		_ = admin.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", ns)
	q.Set("application_name", ns)
	u.RawQuery = q.Encode()
	return u.String()
}

// addr returns the host:port s's connections go to.
func (s server) address(t testing.TB) string {
	if s.d == sqldb.MySQL {
		cfg, err := mysql.ParseDSN(testkit.MySQLURL(t))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Addr
	}
	cfg, err := pgx.ParseConfig(testkit.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// tables migrates a fresh pair of tables on db and returns their Options.
func tables(t testing.TB, db *sql.DB, d sqldb.Dialect) *sqldb.Options {
	t.Helper()
	ns := testkit.Namespace(t)
	opts := &sqldb.Options{StoreTable: sqldb.Identifier{ns + "_store"}, LeaseTable: sqldb.Identifier{ns + "_leases"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqldb.Migrate(ctx, db, d, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return opts
}

func testCtx(t testing.TB) context.Context { return testkit.Context(t) }

// direct calls a Backend's driver methods with the arguments of the
// per-shape methods it had before the driver contract, for the tests that
// talk to a Backend without a lock.Client (round trips, statements, what
// the tables hold): each method is one driver call. Its methods shadow the
// Backend's own of the same name, so a direct is no driver.Backend: give
// lock.New its Backend. Nothing here checks input, as the Backend does not:
// bad-input tests go through a lock.Client.
type direct struct{ *sqldb.Backend }

// newDirect returns a Backend on db in dialect d, called directly.
func newDirect(db *sql.DB, d sqldb.Dialect, opts *sqldb.Options) direct {
	return direct{sqldb.NewBackend(db, d, opts)}
}

// lockInfo is what Inspect reports of a lock, flattened: its one holder (if
// Held) and the live places in its line.
type lockInfo struct {
	Held     bool
	Owner    string
	Token    fence.Token
	TTL      time.Duration
	Metadata string
	Waiting  int
}

// permitReq is what a permit acquire asks for: its kind, a semaphore's
// limit, the TTL, and the place in line (0: none).
type permitReq struct {
	Kind  driver.Kind
	Limit int
	TTL   time.Duration
	Place time.Duration
}

// anyPermit is the kind a permit claim names: Extend, Release, Await and
// Leave find an owner's permit or place whatever its kind.
const anyPermit = driver.Write

func (b direct) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	return b.AcquireMeta(ctx, name, owner, ttl, "")
}

// AcquireMeta is Acquire with holder metadata.
func (b direct) AcquireMeta(ctx context.Context, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Metadata: md})
	return g.Token, err
}

// AcquireOrEnqueue is Acquire with a place in line.
func (b direct) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Place: place})
	return g.Token, err
}

// AcquireMulti is Acquire of a set.
func (b direct) AcquireMulti(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Names: names, Owner: owner, TTL: ttl, Kind: driver.Exclusive})
	return g.Tokens, err
}

// Resume is Acquire with Resume.
func (b direct) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	g, err := b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Resume: true})
	return g.Token, err
}

func (b direct) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.Backend.Extend(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}, ttl)
}

func (b direct) Release(ctx context.Context, name, owner string) error {
	return b.Backend.Release(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive})
}

// AwaitTurn is Await in a lock's line.
func (b direct) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	return b.Backend.Await(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}, max)
}

// LeaveQueue is Leave of a lock's line.
func (b direct) LeaveQueue(ctx context.Context, name, owner string) error {
	return b.Backend.Leave(ctx, driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive})
}

func (b direct) Inspect(ctx context.Context, name string) (lockInfo, error) {
	di, err := b.Backend.Inspect(ctx, name, driver.Exclusive)
	if err != nil {
		return lockInfo{}, err
	}
	info := lockInfo{Waiting: di.Waiting}
	if len(di.Holders) > 0 {
		h := di.Holders[0]
		info.Held, info.Owner, info.Token, info.TTL, info.Metadata = true, h.Owner, h.Token, h.TTL, h.Metadata
	}
	return info, nil
}

// AcquirePermit is Acquire of a permit kind.
func (b direct) AcquirePermit(ctx context.Context, name, owner string, req permitReq) (driver.Grant, error) {
	return b.Backend.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: req.TTL, Kind: req.Kind, Limit: req.Limit, Place: req.Place})
}

// ExtendPermit is Extend of a permit.
func (b direct) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.Backend.Extend(ctx, driver.Claim{Name: name, Owner: owner, Kind: anyPermit}, ttl)
}

// ReleasePermit is Release of a permit.
func (b direct) ReleasePermit(ctx context.Context, name, owner string) error {
	return b.Backend.Release(ctx, driver.Claim{Name: name, Owner: owner, Kind: anyPermit})
}

// AwaitPermit is Await in a permit name's line.
func (b direct) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	return b.Backend.Await(ctx, driver.Claim{Name: name, Owner: owner, Kind: anyPermit}, max)
}

// LeavePermitLine is Leave of a permit name's line.
func (b direct) LeavePermitLine(ctx context.Context, name, owner string) error {
	return b.Backend.Leave(ctx, driver.Claim{Name: name, Owner: owner, Kind: anyPermit})
}

// InspectPermits is Inspect of a permit name.
func (b direct) InspectPermits(ctx context.Context, name string) (driver.Info, error) {
	return b.Backend.Inspect(ctx, name, anyPermit)
}
