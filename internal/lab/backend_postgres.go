package lab

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

var postgresURL = flag.String("postgres-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"PostgreSQL URL for -backend postgres; the run uses a schema of its own and drops it afterwards")

func init() {
	RegisterBackend("postgres", openPostgres)
}

// openPostgres creates a schema for this run (fencelab_ and random hex),
// a pool whose connections use it, and fencekit's tables in it. The close
// function drops the schema and closes the pool.
func openPostgres(ctx context.Context) (driver.Backend, fence.Store, func(), error) {
	cfg, err := pgxpool.ParseConfig(*postgresURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: %w", err)
	}
	schema := pgx.Identifier{"fencelab_" + runID()}
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("postgres: %w", err)
	}
	dropSchema := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(dctx, "DROP SCHEMA IF EXISTS "+schema.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: drop schema %s: %v\n", schema.Sanitize(), err)
		}
		_ = admin.Close(dctx)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema.Sanitize()); err != nil {
		_ = admin.Close(ctx)
		return nil, nil, nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema[0]
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		dropSchema()
		return nil, nil, nil, fmt.Errorf("postgres: %w", err)
	}
	if err := postgres.Migrate(ctx, pool, nil); err != nil {
		pool.Close()
		dropSchema()
		return nil, nil, nil, err
	}
	closeFn := func() {
		pool.Close()
		dropSchema()
	}
	return postgres.NewBackend(pool, nil), postgres.NewStore(pool, nil), closeFn, nil
}
