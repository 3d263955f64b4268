package fencectl

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/adapters/postgres"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// target is one backend with its fenced store and the operations that only
// an operator needs. bump is nil where it has no meaning; noBump says why.
type target struct {
	kind    string
	backend driver.Backend
	// store is the fenced store; nil when the command line does not say
	// where it is, and noStore then says which flag does.
	store   fence.Store
	noStore string
	// storeAt says where store is: "Redis, key prefix P", "table T".
	storeAt string
	list    func(ctx context.Context, prefix string) ([]lock.Info, error)
	// permitNames names the semaphores and read-write locks in use whose
	// names start with prefix; nil where the backend has no permits.
	permitNames func(ctx context.Context, prefix string) ([]string, error)
	bump        func(ctx context.Context, by int64) (bumpResult, error)
	// waiters counts the live places in each named lock's queue; nil
	// where the backend has no queue to read.
	waiters func(ctx context.Context, names []string) ([]int64, error)
	noBump  string
	close   func()
}

// bumpResult is what a backend's bump did.
type bumpResult struct {
	Rows     int64
	MaxToken fence.Token
	summary  string // the line to print; the SQL backends' when empty
}

// backends names the kinds fencectl knows, in the order its messages
// list them.
var backends = []string{"redis", "postgres", "mysql", "postgres-sqldb"}

// open connects to the backend that the flags and the environment name.
func open(ctx context.Context, c *config) (*target, error) {
	kind := c.backend
	if kind == "" {
		var set []string
		for _, u := range []struct{ kind, url string }{{"redis", c.redisURL}, {"postgres", c.postgresURL}, {"mysql", c.mysqlURL}} {
			if u.url != "" {
				set = append(set, u.kind)
			}
		}
		for _, k := range kinds {
			if c.extraURLs[k.Name] != "" {
				set = append(set, k.Name)
			}
		}
		switch {
		case len(c.urlFlags) == 1:
			// A URL named on the command line wins over the
			// environment's.
			kind = c.urlFlags[0]
		case len(set) == 0:
			return nil, usagef("no server: set %s (or %s)", serverFlags(), serverEnvs())
		case len(set) == 1:
			kind = set[0]
		default:
			return nil, usagef("servers of %s are named: choose one with --backend", strings.Join(set, " and "))
		}
	}
	if known(kind) {
		if err := checkBackendFlags(c, kind); err != nil {
			return nil, err
		}
	}
	switch kind {
	case "redis":
		return openRedis(ctx, c)
	case "postgres":
		return openPostgres(ctx, c)
	case "mysql":
		return openMySQL(ctx, c)
	case "postgres-sqldb":
		return openPostgresSQL(ctx, c)
	}
	for _, k := range kinds {
		if k.Name == kind {
			return openKind(ctx, k, c)
		}
	}
	return nil, usagef("unknown backend %q (have: %s%s)", kind, strings.Join(backends, ", "), kindNames())
}

// known reports whether kind is a backend that fencectl has.
func known(kind string) bool {
	if contains(backends, kind) {
		return true
	}
	for _, k := range kinds {
		if k.Name == kind {
			return true
		}
	}
	return false
}

// serverFlags lists the flags that name a server, for the message of a
// command line that names none.
func serverFlags() string {
	flags := []string{"--redis-url", "--postgres-url", "--mysql-url"}
	for _, k := range kinds {
		flags = append(flags, "--"+k.Flag)
	}
	return orList(flags)
}

// serverEnvs lists the variables that name a server.
func serverEnvs() string {
	envs := []string{"FENCEKIT_REDIS_URL", "FENCEKIT_POSTGRES_URL", "FENCEKIT_MYSQL_URL"}
	for _, k := range kinds {
		envs = append(envs, k.Env)
	}
	return strings.Join(envs, " / ")
}

// orList is "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

const redisNoBump = `bump is not needed on Redis, and fencectl does not change Redis counters:
a Redis token is max(counter + 1, the server's TIME in microseconds), so after
a restore from an RDB or AOF file (or a failover to a replica that missed
writes) new tokens are still above every earlier one, as long as the server
clock has not stepped back. If it has, keep the locks unused until the clock
has passed the highest token issued (fencectl inspect shows a holder's token,
a microsecond timestamp).`

func openRedis(ctx context.Context, c *config) (*target, error) {
	if c.redisURL == "" {
		return nil, usagef("--backend redis needs --redis-url or FENCEKIT_REDIS_URL")
	}
	var rdb goredis.UniversalClient
	var addr string
	if c.redisCluster {
		opts, err := goredis.ParseClusterURL(c.redisURL)
		if err != nil {
			return nil, usagef("redis cluster URL: %v", err)
		}
		rdb, addr = goredis.NewClusterClient(opts), strings.Join(opts.Addrs, ",")
	} else {
		opts, err := goredis.ParseURL(c.redisURL)
		if err != nil {
			return nil, usagef("redis URL: %v", err)
		}
		rdb, addr = goredis.NewClient(opts), opts.Addr
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, &unreachableError{what: "Redis", addr: addr, err: err}
	}
	b := fenceredis.NewBackend(rdb, &fenceredis.BackendOptions{Prefix: c.prefix})
	return &target{
		kind:        "redis",
		backend:     b,
		store:       fenceredis.NewStore(rdb, &fenceredis.StoreOptions{Prefix: c.storePrefix}),
		storeAt:     fmt.Sprintf("Redis, key prefix %q (--store-prefix)", c.storePrefix),
		list:        b.List,
		permitNames: b.PermitNames,
		waiters:     func(ctx context.Context, names []string) ([]int64, error) { return redisWaiters(ctx, rdb, b, names) },
		noBump:      redisNoBump,
		close:       func() { _ = rdb.Close() },
	}, nil
}

func openPostgres(ctx context.Context, c *config) (*target, error) {
	if c.postgresURL == "" {
		return nil, usagef("--backend postgres needs --postgres-url or FENCEKIT_POSTGRES_URL")
	}
	cfg, err := pgxpool.ParseConfig(c.postgresURL)
	if err != nil {
		return nil, usagef("postgres URL: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		addr := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
		return nil, &unreachableError{what: "PostgreSQL", addr: addr, err: err}
	}
	opts := &postgres.Options{StoreTable: identifier(c.storeTable), LeaseTable: identifier(c.leaseTable)}
	admin := postgres.NewAdmin(pool, opts)
	return &target{
		kind:        "postgres",
		backend:     postgres.NewBackend(pool, opts),
		store:       postgres.NewStore(pool, opts),
		storeAt:     fmt.Sprintf("table %s (--store-table)", c.storeTable),
		list:        admin.List,
		permitNames: admin.PermitNames,
		waiters:     admin.Waiters,
		bump: func(ctx context.Context, by int64) (bumpResult, error) {
			r, err := admin.Bump(ctx, by)
			return bumpResult{Rows: r.Rows, MaxToken: r.MaxToken}, err
		},
		close: pool.Close,
	}, nil
}

// redisWaiters counts the places in each lock's queue that have not
// expired by the server's clock (the places set is scored by expiry in
// server milliseconds), in one pipeline.
func redisWaiters(ctx context.Context, rdb goredis.UniversalClient, b *fenceredis.Backend, names []string) ([]int64, error) {
	if len(names) == 0 {
		return nil, nil
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	after := "(" + strconv.FormatInt(now.UnixMilli(), 10)
	cmds := make([]*goredis.IntCmd, len(names))
	if _, err := rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.ZCount(ctx, b.PlacesKey(name), after, "+inf")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	counts := make([]int64, len(names))
	for i, cmd := range cmds {
		counts[i] = cmd.Val()
	}
	return counts, nil
}

// identifier splits "schema.table" at its first dot; the adapter checks
// and quotes the parts.
func identifier(s string) pgx.Identifier {
	if schema, table, ok := strings.Cut(s, "."); ok {
		return pgx.Identifier{schema, table}
	}
	return pgx.Identifier{s}
}
