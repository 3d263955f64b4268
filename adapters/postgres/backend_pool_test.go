package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
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
	_, err := newCalls(pool, same).acquire(ctx, "job", newOwner(t), time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.ErrorIs(t, postgres.NewStore(pool, same).Put(ctx, "k", 1, nil), fence.ErrInvalid)

	// The store table exists; naming it again, qualified, as the lease table.
	require.NoError(t, postgres.Migrate(ctx, pool, nil))
	err = postgres.Migrate(ctx, pool, &postgres.Options{LeaseTable: pgx.Identifier{schema, postgres.DefaultStoreTable}})
	require.ErrorIs(t, err, fence.ErrInvalid)
	require.Equal(t, 6, tables()) // store, leases, the leases' queue and its three permit tables
}

// acquireCounter counts the connections taken from its pool with Acquire.
type acquireCounter struct {
	postgres.Pool
	n atomic.Int64
}

func (a *acquireCounter) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	a.n.Add(1)
	return a.Pool.Acquire(ctx)
}

// The calls that take a connection of their own with Pool.Acquire are the
// ones Pool's doc lists, and no others.
func TestPoolAcquireAsDocumented(t *testing.T) {
	ctx := testCtx(t)
	pool := &acquireCounter{Pool: migrated(t, testkit.Postgres(t))}
	b := newCalls(pool, nil)
	admin := postgres.NewAdmin(pool, nil)
	h, w := newOwner(t), newOwner(t)
	ops := []struct {
		name     string
		acquires int64
		run      func() error
	}{
		{"Acquire of a lock", 0, func() error { _, err := b.acquire(ctx, "l", h, time.Minute); return err }},
		{"Acquire of a lock with a place", 0, func() error {
			_, err := b.enqueue(ctx, "l", w, time.Minute, time.Minute)
			return wantHeld(err)
		}},
		{"Await in line, nobody listening", 1, func() error { return b.Await(ctx, lockClaim("l", w), time.Second) }},
		{"Await in line, listening", 0, func() error {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			if err := b.Await(wctx, lockClaim("l", w), time.Minute); !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("Await = %v; want the deadline", err)
			}
			return nil
		}},
		{"Leave of a lock", 0, func() error { return b.leave(ctx, "l", w) }},
		{"Resume", 0, func() error { _, err := b.resume(ctx, "l", h, time.Minute); return err }},
		{"Extend of a lock", 0, func() error { return b.extend(ctx, "l", h, time.Minute) }},
		{"Inspect of a lock", 0, func() error { _, err := b.inspect(ctx, "l"); return err }},
		{"Release of a lock", 0, func() error { return b.release(ctx, "l", h) }},
		{"Acquire of a set", 1, func() error { _, err := b.acquireSet(ctx, []string{"a", "b"}, h, time.Minute); return err }},
		{"Acquire of a permit", 1, func() error { _, err := b.permit(ctx, "s", h, semReq(1)); return err }},
		{"Acquire of a permit with a place", 1, func() error {
			_, err := b.permit(ctx, "s", w, inLine(semReq(1), time.Minute))
			return wantHeld(err)
		}},
		{"Extend of a permit", 1, func() error { return b.extendPermit(ctx, "s", h, time.Minute) }},
		{"Inspect of a permit name", 0, func() error { _, err := b.inspectPermits(ctx, "s"); return err }},
		{"Leave of a permit line", 1, func() error { return b.leavePermitLine(ctx, "s", w) }},
		{"Release of a permit", 1, func() error { return b.releasePermit(ctx, "s", h) }},
		{"Admin.List", 0, func() error { _, err := admin.List(ctx, ""); return err }},
		{"Admin.Waiters", 0, func() error { _, err := admin.Waiters(ctx, []string{"l"}); return err }},
		{"Admin.Bump", 1, func() error { _, err := admin.Bump(ctx, 1); return err }},
	}
	for _, op := range ops {
		before := pool.n.Load()
		require.NoError(t, op.run(), op.name)
		require.Equal(t, op.acquires, pool.n.Load()-before, "%s: connections acquired", op.name)
	}
	before := pool.n.Load()
	_, err := b.Sweep(ctx, time.Microsecond)
	require.NoError(t, err)
	require.Greater(t, pool.n.Load()-before, int64(0), "Sweep: connections acquired")
}

// wantHeld returns nil for an error matching ErrHeld, and the error (or
// one saying it is missing) otherwise.
func wantHeld(err error) error {
	if errors.Is(err, lock.ErrHeld) {
		return nil
	}
	if err == nil {
		return errors.New("admitted; want ErrHeld")
	}
	return err
}
