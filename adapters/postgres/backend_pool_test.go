package postgres_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// NewBackend takes a pool and nothing else. A token minted inside a pgx.Tx
// that rolls back is minted again for the next holder (two holders, one
// token); one *pgx.Conn shared by a keep-alive and a new acquire is used
// by two goroutines at once ("conn busy", or a data race). Both are
// compile errors: pgx.Tx, *pgx.Conn and *pgxpool.Conn do not satisfy the
// parameter's type.
func TestBackendTakesOnlyAPool(t *testing.T) {
	param := reflect.TypeOf(postgres.NewBackend).In(0)
	require.True(t, reflect.TypeFor[*pgxpool.Pool]().AssignableTo(param), "a *pgxpool.Pool must do")
	for _, typ := range []reflect.Type{reflect.TypeFor[pgx.Tx](), reflect.TypeFor[*pgx.Conn](), reflect.TypeFor[*pgxpool.Conn]()} {
		require.False(t, typ.AssignableTo(param), "NewBackend must not accept a %v", typ)
	}
}

// Migrate refuses Options that put the Store and the Backend in one table,
// however the two names are spelled, and creates nothing; Store and Backend
// refuse such Options too.
func TestMigrateRefusesOneTableForBoth(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	var schema string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	tables := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n))
		return n
	}
	for _, opts := range []*postgres.Options{
		{StoreTable: pgx.Identifier{"same"}, LeaseTable: pgx.Identifier{"same"}},
		{StoreTable: pgx.Identifier{schema, "same"}, LeaseTable: pgx.Identifier{"same"}},
		{LeaseTable: pgx.Identifier{postgres.DefaultStoreTable}},
		{StoreTable: pgx.Identifier{postgres.DefaultLeaseTable}},
	} {
		require.ErrorIs(t, postgres.Migrate(ctx, pool, opts), fence.ErrInvalid, "%+v", opts)
		require.Zero(t, tables(), "a refused Migrate created tables (%+v)", opts)
	}
	same := &postgres.Options{StoreTable: pgx.Identifier{"same"}, LeaseTable: pgx.Identifier{"same"}}
	_, err := postgres.NewBackend(pool, same).Acquire(ctx, "job", newOwner(t), time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.ErrorIs(t, postgres.NewStore(pool, same).Put(ctx, "k", 1, nil), fence.ErrInvalid)

	// The store table exists; naming it again, qualified, as the lease table.
	require.NoError(t, postgres.Migrate(ctx, pool, nil))
	err = postgres.Migrate(ctx, pool, &postgres.Options{LeaseTable: pgx.Identifier{schema, postgres.DefaultStoreTable}})
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.Equal(t, 6, tables()) // store, leases, the leases' queue and its three permit tables
}
