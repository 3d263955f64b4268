package sqldb_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// Stale refusals by Guard.Check and UpdateFenced reach the Observer of the
// lease in the context (Do's), as writes through Lease.Fenced do; without a
// lease in the context they are refused and not reported.
func TestStaleRefusalsReachTheObserver(t *testing.T) {
	for _, s := range []server{mysqlServer(t, "mysql", nil), pgServer(t)} {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			require.NoError(t, sqldb.Migrate(ctx, db, s.d, nil))
			_, err := db.ExecContext(ctx, "CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(16), fence BIGINT)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO jobs VALUES (1, 'new', 100)")
			require.NoError(t, err)
			guard := sqldb.NewGuard(s.d, nil)
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, guard.Check(ctx, tx, "resource", 100)) // a newer holder was here
			require.NoError(t, tx.Commit())

			var mu sync.Mutex
			var stale []lock.Event
			client := lock.New(sqldb.NewBackend(db, s.d, nil), &lock.Options{Observer: &lock.Observer{Stale: func(e lock.Event) {
				mu.Lock()
				stale = append(stale, e)
				mu.Unlock()
			}}})
			row := sqldb.Row{Table: sqldb.Identifier{"jobs"}, Key: sqldb.Match{"id": 1}}
			err = client.Do(ctx, "jobs", time.Minute, func(ctx context.Context, lease *lock.Lease) error {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				require.ErrorIs(t, guard.Check(ctx, tx, "resource", lease.Token()), fence.ErrStale)
				require.NoError(t, tx.Rollback())
				tx, err = db.BeginTx(ctx, nil)
				require.NoError(t, err)
				require.ErrorIs(t, sqldb.UpdateFenced(ctx, tx, s.d, row, lease.Token(), map[string]any{"state": "done"}), fence.ErrStale)
				// Without the lease in the context: refused, not reported.
				require.ErrorIs(t, sqldb.UpdateFenced(context.Background(), tx, s.d, row, lease.Token(), nil), fence.ErrStale)
				return nil
			})
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, 2, len(stale), stale)
			require.Equal(t, "resource", stale[0].Key)
			for _, e := range stale {
				require.Equal(t, "jobs", e.Name)
				require.True(t, errors.Is(e.Err, fence.ErrStale), e.Err)
			}
		})
	}
}
