package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestQueuedAcquireWithoutQueueTablePolls: an application upgraded before
// its schema (the lease table exists, the queue table does not) keeps
// working: a blocking Acquire behind a holder polls instead of failing with
// ErrNotMigrated, its refusals say to run Migrate, and it gets the lock
// after the release with a greater token. LeaveQueue has nothing to do. A
// missing lease table is still ErrNotMigrated.
func TestQueuedAcquireWithoutQueueTablePolls(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	_, err := pool.Exec(ctx, `DROP TABLE fencekit_leases_queue`)
	require.NoError(t, err)
	b := postgres.NewBackend(pool, nil)
	holder := newOwner(t)
	first, err := b.Acquire(ctx, "l", holder, time.Minute)
	require.NoError(t, err)

	var (
		mu      sync.Mutex
		refusal error
	)
	refused := make(chan struct{})
	c := lock.New(b, &lock.Options{Observer: func(e lock.Event) {
		if e.Kind != lock.EventRetrying {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if refusal == nil {
			refusal = e.Err
			close(refused)
		}
	}})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type result struct {
		l   *lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(wctx, "l", time.Minute)
		got <- result{l, err}
	}()
	select {
	case <-refused:
	case r := <-got:
		t.Fatalf("Acquire returned before the release: %v", r.err)
	}
	mu.Lock()
	require.ErrorIs(t, refusal, lock.ErrHeld)
	require.True(t, strings.Contains(refusal.Error(), "postgres.Migrate") && strings.Contains(refusal.Error(), "fencekit_leases_queue"),
		"the refusal %q does not say the queue table is missing", refusal)
	mu.Unlock()

	require.NoError(t, b.Release(ctx, "l", holder))
	r := <-got
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), first)
	require.NoError(t, r.l.Release(ctx))
	require.NoError(t, b.LeaveQueue(ctx, "l", newOwner(t)), "LeaveQueue without the queue table")

	ns := testkit.Namespace(t)
	none := postgres.NewBackend(pool, &postgres.Options{LeaseTable: pgx.Identifier{ns + "_noleases"}})
	_, err = none.AcquireOrEnqueue(ctx, "l", newOwner(t), time.Minute, time.Second)
	require.ErrorIs(t, err, postgres.ErrNotMigrated)
	require.True(t, strings.Contains(err.Error(), ns+"_noleases"), "%q does not name the lease table", err)
}
