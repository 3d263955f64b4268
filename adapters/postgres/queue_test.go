package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/require"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// Migrate on the schema of the previous version (a lease table without
// metadata, no queue table) adds the queue table, and queued waiting works
// on it; before Migrate, AcquireOrEnqueue says what is missing.
func TestMigrateAddsQueueTable(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	createPreviousLeaseTable(t, ctx, pool)
	b := postgres.NewBackend(pool, nil)
	_, err := b.AcquireOrEnqueue(ctx, "l", newOwner(t), time.Minute, time.Second)
	require.ErrorIs(t, err, postgres.ErrNotMigrated)
	// The previous version's Migrate with the metadata column: Acquire and
	// Release work before the queue table exists (a rolling upgrade).
	_, err = pool.Exec(ctx, `ALTER TABLE fencekit_leases ADD COLUMN metadata text`)
	require.NoError(t, err)
	o := newOwner(t)
	_, err = b.Acquire(ctx, "old", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "old", o), "Release without the queue table")
	require.ErrorIs(t, b.Release(ctx, "old", o), lock.ErrNotHeld)

	migrated(t, pool)
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('fencekit_leases_queue') IS NOT NULL`).Scan(&exists))
	require.True(t, exists, "Migrate did not create the queue table")
	h, w := newOwner(t), newOwner(t)
	tok, err := b.AcquireOrEnqueue(ctx, "l", h, time.Minute, time.Second)
	require.NoError(t, err)
	_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.Release(ctx, "l", h))
	next, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
	require.NoError(t, err)
	require.Greater(t, next, tok)
}

// With nobody waiting, queued waiting costs what Acquire costs: one
// statement to take a lock, one to be refused (and queued), one to leave
// the queue, and no listening connection.
func TestQueueOneStatementPerCall(t *testing.T) {
	ctx := testCtx(t)
	db := &countingDB{Pool: migrated(t, testkit.Postgres(t))}
	b := postgres.NewBackend(db, nil)
	h, w := newOwner(t), newOwner(t)
	ops := []struct {
		name string
		run  func() error
	}{
		{"AcquireOrEnqueue of a free lock", func() error { _, err := b.AcquireOrEnqueue(ctx, "l", h, time.Minute, time.Second); return err }},
		{"AcquireOrEnqueue of a held lock", func() error {
			_, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			var held *lock.HeldError
			if !errors.As(err, &held) || held.TTL <= 30*time.Second {
				return errors.New("want a *lock.HeldError with the holder's TTL")
			}
			return nil
		}},
		{"LeaveQueue", func() error { return b.LeaveQueue(ctx, "l", w) }},
		{"Release", func() error { return b.Release(ctx, "l", h) }},
	}
	for _, op := range ops {
		before := db.n.Load()
		require.NoError(t, op.run(), op.name)
		require.Equal(t, int64(1), db.n.Load()-before, "%s: statements", op.name)
	}
	require.False(t, postgres.ListeningForTest(b), "nobody waited, yet a listening connection is open")
}

// The listening connection is opened by the first wait and closed once
// nobody has waited for the linger; the next wait opens a new one, and its
// waiter is still woken by the release.
func TestListenerOpenedOnFirstWaitAndDroppedWhenIdle(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := postgres.NewBackend(pool, nil)
	postgres.SetListenLingerForTest(b, 100*time.Millisecond)
	c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 30 * time.Second}})
	for round := 1; round <= 2; round++ {
		h := newOwner(t)
		_, err := b.Acquire(ctx, "l", h, time.Minute)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, "l", time.Minute)
			if err == nil {
				err = l.Release(context.WithoutCancel(ctx))
			}
			got <- err
		}()
		poll(t, "a listening connection", func() bool { return postgres.ListeningForTest(b) })
		released := time.Now()
		require.NoError(t, b.Release(ctx, "l", h))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the waiter was not woken by the release", round)
		}
		// Woken by NOTIFY, not by its renewal (every 10 s here).
		require.Less(t, time.Since(released), 5*time.Second)
		poll(t, "the idle listening connection closed", func() bool { return !postgres.ListeningForTest(b) })
	}
}

// A listening connection that the server ends (pg_terminate_backend, as a
// failover or an admin would) loses the wake-ups sent meanwhile, but not the
// waiter: it is served by its next renewal (a third of its place TTL), and
// the next wait listens again.
func TestWaiterServedAfterListenerKilled(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := postgres.NewBackend(pool, nil)
	const placeTTL = 900 * time.Millisecond // renewed every 300 ms
	c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: placeTTL}})
	h := newOwner(t)
	_, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "l", time.Minute)
		if err == nil {
			err = l.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	poll(t, "a listening connection", func() bool { return postgres.ListeningForTest(b) })
	killed := postgres.ListenerPIDForTest(b)
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int64(killed)).Scan(&ok))
	require.True(t, ok, "pg_terminate_backend")
	poll(t, "the killed listener noticed", func() bool {
		return !postgres.ListeningForTest(b) || postgres.ListenerPIDForTest(b) != killed
	})
	released := time.Now()
	require.NoError(t, b.Release(ctx, "l", h))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not served after its listening connection was killed")
	}
	require.Less(t, time.Since(released), 2*time.Second)
}

// A store table named as the lease table's queue table is refused before
// anything is sent.
func TestStoreTableNamedAsQueueTableRefused(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	opts := &postgres.Options{StoreTable: pgx.Identifier{"locks_queue"}, LeaseTable: pgx.Identifier{"locks"}}
	require.ErrorIs(t, postgres.Migrate(ctx, pool, opts), fence.ErrInvalid)
	_, err := postgres.NewBackend(pool, opts).AcquireOrEnqueue(ctx, "l", newOwner(t), time.Minute, time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
}
