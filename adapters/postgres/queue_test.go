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
	"github.com/fencekit/fencekit/lock/driver"
)

// Migrate on the schema of the previous version (a lease table without
// metadata, no queue table) adds the queue table, and queued waiting works
// on it; before Migrate, an acquire with a place in line says what is missing.
func TestMigrateAddsQueueTable(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	createPreviousLeaseTable(t, ctx, pool)
	b := newCalls(pool, nil)
	_, err := b.enqueue(ctx, "l", newOwner(t), time.Minute, time.Second)
	require.ErrorIs(t, err, postgres.ErrNotMigrated)
	// The previous version's Migrate with the metadata column: Acquire and
	// Release work before the queue table exists (a rolling upgrade).
	_, err = pool.Exec(ctx, `ALTER TABLE fencekit_leases ADD COLUMN metadata text`)
	require.NoError(t, err)
	o := newOwner(t)
	_, err = b.acquire(ctx, "old", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.release(ctx, "old", o), "Release without the queue table")
	require.ErrorIs(t, b.release(ctx, "old", o), lock.ErrNotHeld)

	migrated(t, pool)
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('fencekit_leases_queue') IS NOT NULL`).Scan(&exists))
	require.True(t, exists, "Migrate did not create the queue table")
	h, w := newOwner(t), newOwner(t)
	tok, err := b.enqueue(ctx, "l", h, time.Minute, time.Second)
	require.NoError(t, err)
	_, err = b.enqueue(ctx, "l", w, time.Minute, time.Second)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.release(ctx, "l", h))
	next, err := b.enqueue(ctx, "l", w, time.Minute, time.Second)
	require.NoError(t, err)
	require.Greater(t, next, tok)
}

// With nobody waiting, queued waiting costs what Acquire costs: one
// statement to take a lock, one to be refused (and queued), one to leave
// the queue, and no listening connection.
func TestQueueOneStatementPerCall(t *testing.T) {
	ctx := testCtx(t)
	db := &countingDB{Pool: migrated(t, testkit.Postgres(t))}
	b := newCalls(db, nil)
	h, w := newOwner(t), newOwner(t)
	ops := []struct {
		name string
		run  func() error
	}{
		{"Acquire with a place, of a free lock", func() error { _, err := b.enqueue(ctx, "l", h, time.Minute, time.Second); return err }},
		{"Acquire with a place, of a held lock", func() error {
			_, err := b.enqueue(ctx, "l", w, time.Minute, time.Second)
			var held *driver.HeldError
			if !errors.As(err, &held) || held.TTL <= 30*time.Second {
				return errors.New("want a *driver.HeldError with the holder's TTL")
			}
			return nil
		}},
		{"Leave", func() error { return b.leave(ctx, "l", w) }},
		{"Release", func() error { return b.release(ctx, "l", h) }},
	}
	for _, op := range ops {
		before := db.n.Load()
		require.NoError(t, op.run(), op.name)
		require.Equal(t, int64(1), db.n.Load()-before, "%s: statements", op.name)
	}
	require.False(t, postgres.ListeningForTest(b.Backend), "nobody waited, yet a listening connection is open")
}

// The listening connection is opened by the first wait and closed once
// nobody has waited for the linger; the next wait opens a new one, and its
// waiter is still woken by the release.
func TestListenerOpenedOnFirstWaitAndDroppedWhenIdle(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	postgres.SetListenLingerForTest(b.Backend, 100*time.Millisecond)
	c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 30 * time.Second}})
	for round := 1; round <= 2; round++ {
		h := newOwner(t)
		_, err := b.acquire(ctx, "l", h, time.Minute)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, "l", time.Minute)
			if err == nil {
				err = l.Release(context.WithoutCancel(ctx))
			}
			got <- err
		}()
		poll(t, "a listening connection", func() bool { return postgres.ListeningForTest(b.Backend) })
		released := time.Now()
		require.NoError(t, b.release(ctx, "l", h))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the waiter was not woken by the release", round)
		}
		// Woken by NOTIFY, not by its renewal (every 10 s here).
		require.Less(t, time.Since(released), 5*time.Second)
		poll(t, "the idle listening connection closed", func() bool { return !postgres.ListeningForTest(b.Backend) })
	}
}

// A listening connection that the server ends (pg_terminate_backend, as a
// failover or an admin would) loses the wake-ups sent meanwhile, but not the
// waiter: it is served by its next renewal (a third of its place TTL), and
// the next wait listens again.
func TestWaiterServedAfterListenerKilled(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	const placeTTL = 900 * time.Millisecond // renewed every 300 ms
	c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: placeTTL}})
	h := newOwner(t)
	_, err := b.acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "l", time.Minute)
		if err == nil {
			err = l.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	poll(t, "a listening connection", func() bool { return postgres.ListeningForTest(b.Backend) })
	killed := postgres.ListenerPIDForTest(b.Backend)
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int64(killed)).Scan(&ok))
	require.True(t, ok, "pg_terminate_backend")
	poll(t, "the killed listener noticed", func() bool {
		return !postgres.ListeningForTest(b.Backend) || postgres.ListenerPIDForTest(b.Backend) != killed
	})
	released := time.Now()
	require.NoError(t, b.release(ctx, "l", h))
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
	_, err := newCalls(pool, opts).enqueue(ctx, "l", newOwner(t), time.Minute, time.Second)
	require.ErrorIs(t, err, fence.ErrInvalid)
}

// Inspect of a lock reports its live places in line beside its holder, in
// one statement: a place that expired on the database clock or was left
// is not counted. Before Migrate created the queue table nobody can wait,
// and Inspect still reports the holder.
func TestInspectCountsWaiting(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	db := &countingDB{Pool: pool}
	b := newCalls(db, nil)
	h := newOwner(t)
	tok, err := b.acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	waiters := []string{newOwner(t), newOwner(t), newOwner(t)}
	for _, w := range waiters {
		_, err := b.enqueue(ctx, "l", w, time.Minute, time.Minute)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	inspect := func(want int) {
		t.Helper()
		before := db.n.Load()
		info, err := b.inspect(ctx, "l")
		require.NoError(t, err)
		require.Equal(t, int64(1), db.n.Load()-before, "statements sent by Inspect")
		require.Equal(t, "l", info.Name)
		require.Equal(t, driver.Exclusive, info.Kind)
		require.Len(t, info.Holders, 1)
		require.Equal(t, h, info.Holders[0].Owner)
		require.Equal(t, tok, info.Holders[0].Token)
		require.Equal(t, want, info.Waiting)
	}
	inspect(3)
	_, err = pool.Exec(ctx, `UPDATE fencekit_leases_queue SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE owner = $1`, waiters[0])
	require.NoError(t, err)
	inspect(2)
	require.NoError(t, b.leave(ctx, "l", waiters[1]))
	inspect(1)

	free, err := b.inspect(ctx, "free")
	require.NoError(t, err)
	require.Equal(t, driver.Info{Name: "free", Kind: driver.Exclusive}, free)

	_, err = pool.Exec(ctx, `DROP TABLE fencekit_leases_queue`)
	require.NoError(t, err)
	info, err := b.inspect(ctx, "l")
	require.NoError(t, err, "Inspect without the queue table")
	require.Len(t, info.Holders, 1)
	require.Equal(t, h, info.Holders[0].Owner)
	require.Zero(t, info.Waiting)
}
