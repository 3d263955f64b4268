package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

func init() {
	RegisterProxied("postgres", ProxiedBackend{
		Target: func() (string, error) {
			target, _, err := hostPort("postgres", *postgresURL, "5432")
			return target, err
		},
		Open: func(ctx context.Context, proxyAddr string) (driver.Backend, fence.Store, func(), error) {
			o, err := openPostgresProxied(ctx, *postgresURL, withHost(*postgresURL, proxyAddr))
			if err != nil {
				return nil, nil, nil, err
			}
			return o.backend, o.store, o.close, nil
		},
	})
}

// openPostgresProxied is openPostgres for a chaos run behind the proxy: the
// pool the workers use goes through proxiedURL, while the schema is created
// and dropped over direct connections to directURL, which the proxy's cuts
// cannot break.
func openPostgresProxied(ctx context.Context, directURL, proxiedURL string) (opened, error) {
	direct, err := pgx.ParseConfig(directURL)
	if err != nil {
		return opened{}, fmt.Errorf("postgres: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(proxiedURL)
	if err != nil {
		return opened{}, fmt.Errorf("postgres: %w", err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return opened{}, err
	}
	schema := pgx.Identifier{"fencelab_chaos_" + hex.EncodeToString(b[:])}
	admin := func(ctx context.Context, sql string) error {
		conn, err := pgx.ConnectConfig(ctx, direct.Copy())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, sql)
		return err
	}
	dropSchema := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := admin(dctx, "DROP SCHEMA IF EXISTS "+schema.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "fencelab: drop schema %s: %v\n", schema.Sanitize(), err)
		}
	}
	if err := admin(ctx, "CREATE SCHEMA "+schema.Sanitize()); err != nil {
		return opened{}, fmt.Errorf("postgres: create schema: %w", err)
	}
	direct.RuntimeParams["search_path"] = schema[0]
	if err := func() error {
		conn, err := pgx.ConnectConfig(ctx, direct.Copy())
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		return postgres.Migrate(ctx, conn, nil)
	}(); err != nil {
		dropSchema()
		return opened{}, fmt.Errorf("postgres: migrate: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema[0]
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		dropSchema()
		return opened{}, fmt.Errorf("postgres: %w", err)
	}
	return opened{
		backend: postgres.NewBackend(pool, nil),
		store:   postgres.NewStore(pool, nil),
		close:   func() { pool.Close(); dropSchema() },
	}, nil
}
