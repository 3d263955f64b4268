package sqldb_test

import (
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestAdminWaiters counts the live places in each named queue, in the
// order the names were given: a name nobody waits for counts 0, and a
// place past its expiry is not counted. Backend.Inspect's Waiting counts
// the same.
func TestAdminWaiters(t *testing.T) {
	for _, s := range adminServers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			ctx := testCtx(t)
			b := newDirect(db, s.d, opts)
			admin := sqldb.NewAdmin(db, s.d, opts)
			owner := func() string { o, err := lock.NewOwner(); require.NoError(t, err); return o }

			_, err := b.Acquire(ctx, "busy", owner(), time.Minute)
			require.NoError(t, err)
			for range 3 {
				_, err := b.AcquireOrEnqueue(ctx, "busy", owner(), time.Minute, time.Minute)
				require.ErrorIs(t, err, lock.ErrHeld)
			}
			_, err = b.Acquire(ctx, "brief", owner(), time.Minute)
			require.NoError(t, err)
			_, err = b.AcquireOrEnqueue(ctx, "brief", owner(), time.Minute, driver.MinPlaceTTL)
			require.ErrorIs(t, err, lock.ErrHeld)

			got, err := admin.Waiters(ctx, []string{"idle", "busy", "brief"})
			require.NoError(t, err)
			require.Equal(t, 3, len(got), got)
			require.Equal(t, int64(0), got[0], got)
			require.Equal(t, int64(3), got[1], got)
			// The brief place expires by the database clock.
			deadline := time.Now().Add(10 * time.Second)
			for got[2] != 0 && time.Now().Before(deadline) {
				got, err = admin.Waiters(ctx, []string{"idle", "busy", "brief"})
				require.NoError(t, err)
			}
			require.Equal(t, []int64{0, 3, 0}, got)
			for i, name := range []string{"idle", "busy", "brief"} {
				info, err := b.Inspect(ctx, name)
				require.NoError(t, err)
				require.Equal(t, int(got[i]), info.Waiting, "Inspect(%q).Waiting", name)
			}

			none, err := admin.Waiters(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, 0, len(none))
		})
	}
}
