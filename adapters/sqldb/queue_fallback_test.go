package sqldb_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestQueuedAcquireWithoutQueueTablePolls: an application upgraded before
// its schema (the lease table exists, the queue table does not) keeps
// working, on MariaDB and on PostgreSQL: a blocking Acquire behind a holder
// polls instead of failing with ErrNotMigrated, its refusals say to run
// Migrate, and it gets the lock after the release with a greater token.
// Leave has nothing to do, and Inspect reports the holder with nobody
// waiting. A missing lease table is still ErrNotMigrated.
func TestQueuedAcquireWithoutQueueTablePolls(t *testing.T) {
	for _, s := range servers(t)[:3:3] {
		if s.name == "mysql-foundrows" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			queue := `"` + opts.LeaseTable[0] + `_queue"`
			if s.d == sqldb.MySQL {
				queue = "`" + opts.LeaseTable[0] + "_queue`"
			}
			_, err := db.ExecContext(ctx, "DROP TABLE "+queue)
			require.NoError(t, err)
			b := sqldb.NewBackend(db, s.d, opts)
			testkit.PollsWithoutQueueTable(t, ctx, b, "l", "sqldb.Migrate", opts.LeaseTable[0]+"_queue")
			// Inspect reads the lease row alone: nobody can wait.
			h := testkit.Owner(t)
			_, err = direct{b}.Acquire(ctx, "i", h, time.Minute)
			require.NoError(t, err)
			info, err := direct{b}.Inspect(ctx, "i")
			require.NoError(t, err)
			require.True(t, info.Held && info.Owner == h && info.Waiting == 0, "%+v", info)

			missing := opts.LeaseTable[0] + "_none"
			none := direct{sqldb.NewBackend(db, s.d, &sqldb.Options{StoreTable: opts.StoreTable, LeaseTable: sqldb.Identifier{missing}})}
			_, err = none.AcquireOrEnqueue(ctx, "l", testkit.Owner(t), time.Minute, time.Second)
			require.ErrorIs(t, err, sqldb.ErrNotMigrated)
			require.True(t, strings.Contains(err.Error(), missing), "%q does not name the lease table", err)
		})
	}
}
