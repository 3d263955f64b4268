package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestQueuedAcquireWithoutQueueTablePolls: an application upgraded before
// its schema (the lease table exists, the queue table does not) keeps
// working: a blocking Acquire behind a holder polls instead of failing with
// ErrNotMigrated, its refusals say to run Migrate, and it gets the lock
// after the release with a greater token. Leave has nothing to do. A
// missing lease table is still ErrNotMigrated.
func TestQueuedAcquireWithoutQueueTablePolls(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	_, err := pool.Exec(ctx, `DROP TABLE fencekit_leases_queue`)
	require.NoError(t, err)
	b := newCalls(pool, nil)
	testkit.PollsWithoutQueueTable(t, ctx, b, "l", "postgres.Migrate", "fencekit_leases_queue")

	ns := testkit.Namespace(t)
	none := newCalls(pool, &postgres.Options{LeaseTable: pgx.Identifier{ns + "_noleases"}})
	_, err = none.enqueue(ctx, "l", newOwner(t), time.Minute, time.Second)
	require.ErrorIs(t, err, postgres.ErrNotMigrated)
	require.True(t, strings.Contains(err.Error(), ns+"_noleases"), "%q does not name the lease table", err)
}
