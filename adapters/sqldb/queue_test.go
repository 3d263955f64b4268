package sqldb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// Migrate on the schema of the previous version (store and lease tables, no
// queue table) adds the queue table, and queued waiting works on it; before
// Migrate, AcquireOrEnqueue says what is missing.
func TestMigrateAddsQueueTable(t *testing.T) {
	for _, s := range servers(t)[:3:3] {
		if s.name == "mysql-foundrows" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			ns := testkit.Namespace(t)
			opts := &sqldb.Options{StoreTable: sqldb.Identifier{ns + "_store"}, LeaseTable: sqldb.Identifier{ns + "_leases"}}
			stmts, err := sqldb.MigrateSQL(s.d, opts)
			require.NoError(t, err)
			require.Equal(t, 3, len(stmts))
			for _, st := range stmts[:2] { // the previous version's tables
				_, err := db.ExecContext(ctx, st)
				require.NoError(t, err)
			}
			b := sqldb.NewBackend(db, s.d, opts)
			h, w := testkit.Owner(t), testkit.Owner(t)
			_, err = b.Acquire(ctx, "l", h, time.Minute)
			require.NoError(t, err)
			_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			require.ErrorIs(t, err, sqldb.ErrNotMigrated)

			require.NoError(t, sqldb.Migrate(ctx, db, s.d, opts))
			require.NoError(t, sqldb.Migrate(ctx, db, s.d, opts), "Migrate must be idempotent")
			_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			require.ErrorIs(t, err, lock.ErrHeld)
			require.NoError(t, b.Release(ctx, "l", h))
			_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			require.NoError(t, err)
			require.NoError(t, b.Release(ctx, "l", w))
		})
	}
}

// Without a wake-up, a waiter re-checks at a pace set by its place: the
// first in line every QueuePoll, the one n places behind every
// (n+1)·QueuePoll, never later than AwaitTurn's max.
func TestAwaitTurnPacedByPlace(t *testing.T) {
	s := servers(t)[0]
	ctx := testCtx(t)
	db := s.open(t, nil)
	opts := tables(t, db, s.d)
	b := sqldb.NewBackend(db, s.d, opts)
	h := testkit.Owner(t)
	_, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	waiters := make([]string, 4)
	for i := range waiters {
		waiters[i] = testkit.Owner(t)
		_, err := b.AcquireOrEnqueue(ctx, "l", waiters[i], time.Minute, time.Minute)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	for i, w := range waiters {
		start := time.Now()
		require.NoError(t, b.AwaitTurn(ctx, "l", w, time.Minute))
		took := time.Since(start)
		want := time.Duration(i+1) * sqldb.QueuePoll
		require.True(t, took >= want && took < want+time.Second, fmt.Sprintf("waiter %d of %d re-checked after %v; want %v", i+1, len(waiters), took, want))
	}
	start := time.Now()
	require.NoError(t, b.AwaitTurn(ctx, "l", waiters[3], time.Millisecond))
	require.Less(t, time.Since(start), 4*sqldb.QueuePoll, "AwaitTurn waited past its max")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, b.AwaitTurn(cctx, "l", waiters[3], time.Minute), context.Canceled)
}
