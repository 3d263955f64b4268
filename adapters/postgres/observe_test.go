package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// Stale refusals by Guard.Check and UpdateFenced reach the Observer of the
// lease in the context (Do's), as they do for writes through Lease.Fenced;
// without a lease in the context nothing is reported.
func TestStaleRefusalsReachTheObserver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := migrated(t, testkit.Postgres(t))
	_, err := pool.Exec(ctx, `CREATE TABLE jobs (id int PRIMARY KEY, state text, fence bigint)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO jobs VALUES (1, 'new', 100)`)
	require.NoError(t, err)
	guard := postgres.NewGuard(nil)
	require.NoError(t, guard.Check(ctx, pool, "resource", 100)) // a newer holder was here

	var mu sync.Mutex
	var stale []lock.Event
	client := lock.New(newCalls(pool, nil), &lock.Options{Observer: &lock.Observer{Stale: func(e lock.Event) {
		mu.Lock()
		stale = append(stale, e)
		mu.Unlock()
	}}})
	row := postgres.Row{Table: pgx.Identifier{"jobs"}, Key: postgres.Match{"id": 1}}
	err = client.Do(ctx, "jobs", time.Minute, func(ctx context.Context, lease *lock.Lease) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		require.ErrorIs(t, guard.Check(ctx, tx, "resource", lease.Token()), fence.ErrStale)
		require.ErrorIs(t, postgres.UpdateFenced(ctx, pool, row, lease.Token(), map[string]any{"state": "done"}), fence.ErrStale)
		// Without the lease in the context: refused, not reported.
		require.ErrorIs(t, postgres.UpdateFenced(context.Background(), pool, row, lease.Token(), nil), fence.ErrStale)
		return nil
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, len(stale), stale)
	require.Equal(t, "resource", stale[0].Key)
	require.Equal(t, "id=1", stale[1].Key)
	for _, e := range stale {
		require.Equal(t, "jobs", e.Name)
		require.Equal(t, fence.Token(1), e.Token)
		require.True(t, errors.Is(e.Err, fence.ErrStale), e.Err)
	}
}
