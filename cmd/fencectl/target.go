package main

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
)

// target is one backend with its fenced store and the operations that only
// an operator needs. bump is nil where it has no meaning; noBump says why.
type target struct {
	kind    string
	backend lock.Backend
	store   fence.Store
	list    func(ctx context.Context, prefix string) ([]lock.Info, error)
	bump    func(ctx context.Context, by int64) (postgres.BumpResult, error)
	noBump  string
	close   func()
}

// open connects to the backend that the flags and the environment name.
func open(ctx context.Context, c *config) (*target, error) {
	kind := c.backend
	switch {
	case kind == "" && c.redisURL != "" && c.postgresURL != "":
		return nil, usagef("both a Redis and a PostgreSQL URL are set: choose one with --backend redis|postgres")
	case kind == "" && c.redisURL != "":
		kind = "redis"
	case kind == "" && c.postgresURL != "":
		kind = "postgres"
	case kind == "":
		return nil, usagef("no server: set --redis-url or --postgres-url (or FENCEKIT_REDIS_URL / FENCEKIT_POSTGRES_URL)")
	}
	switch kind {
	case "redis":
		return openRedis(ctx, c)
	case "postgres":
		return openPostgres(ctx, c)
	}
	return nil, usagef("unknown backend %q (have: redis, postgres)", kind)
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
		kind:    "redis",
		backend: b,
		store:   fenceredis.NewStore(rdb, &fenceredis.StoreOptions{Prefix: c.storePrefix}),
		list:    b.List,
		noBump:  redisNoBump,
		close:   func() { _ = rdb.Close() },
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
		kind:    "postgres",
		backend: postgres.NewBackend(pool, opts),
		store:   postgres.NewStore(pool, opts),
		list:    admin.List,
		bump:    admin.Bump,
		close:   pool.Close,
	}, nil
}

// identifier splits "schema.table" at its first dot; the adapter checks
// and quotes the parts.
func identifier(s string) pgx.Identifier {
	if schema, table, ok := strings.Cut(s, "."); ok {
		return pgx.Identifier{schema, table}
	}
	return pgx.Identifier{s}
}
