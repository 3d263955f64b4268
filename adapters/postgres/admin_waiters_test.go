package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestAdminWaiters counts the live places in each named queue, in the
// order the names were given: a name nobody waits for counts 0, and a
// place past its expiry is not counted.
func TestAdminWaiters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	admin := postgres.NewAdmin(pool, nil)

	_, err := b.acquire(ctx, "busy", newOwner(t), time.Minute)
	require.NoError(t, err)
	for range 3 {
		_, err := b.enqueue(ctx, "busy", newOwner(t), time.Minute, time.Minute)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	_, err = b.acquire(ctx, "brief", newOwner(t), time.Minute)
	require.NoError(t, err)
	_, err = b.enqueue(ctx, "brief", newOwner(t), time.Minute, driver.MinPlaceTTL)
	require.ErrorIs(t, err, lock.ErrHeld)

	names := []string{"idle", "busy", "brief"}
	got, err := admin.Waiters(ctx, names)
	require.NoError(t, err)
	require.Equal(t, 3, len(got), got)
	require.Equal(t, int64(0), got[0], got)
	require.Equal(t, int64(3), got[1], got)
	deadline := time.Now().Add(10 * time.Second)
	for got[2] != 0 && time.Now().Before(deadline) {
		got, err = admin.Waiters(ctx, names)
		require.NoError(t, err)
	}
	require.Equal(t, []int64{0, 3, 0}, got)
}

// TestAdminWaitersBeforeMigrate: without the queue table, Waiters says to
// run Migrate.
func TestAdminWaitersBeforeMigrate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := testkit.Postgres(t) // nothing migrated
	_, err := postgres.NewAdmin(pool, nil).Waiters(ctx, []string{"a"})
	if !errors.Is(err, postgres.ErrNotMigrated) {
		t.Fatalf("Waiters before Migrate = %v; want ErrNotMigrated", err)
	}
}
