package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/require"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Migrate adds the metadata column to a lease table created before leases
// carried metadata, keeps its rows and tokens, and running it again changes
// nothing.
func TestMigrateAddsMetadataColumn(t *testing.T) {
	ctx := testCtx(t)
	pool := testkit.Postgres(t)
	// The lease table as earlier versions created it, with a live lease.
	createPreviousLeaseTable(t, ctx, pool)
	var err error
	old := newOwner(t)
	_, err = pool.Exec(ctx, `INSERT INTO fencekit_leases VALUES ('old', $1, 41, now() + interval '1 minute')`, old)
	require.NoError(t, err)

	require.NoError(t, postgres.Migrate(ctx, pool, nil))
	require.NoError(t, postgres.Migrate(ctx, pool, nil), "Migrate is idempotent")
	var columns int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'fencekit_leases' AND column_name = 'metadata'`).Scan(&columns))
	require.Equal(t, 1, columns)

	b := newCalls(pool, nil)
	info, err := b.inspect(ctx, "old")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, driver.Info{Name: "old", Kind: driver.Exclusive, Holders: []driver.Holder{
		{Owner: old, Kind: driver.Exclusive, Token: 41, TTL: info.Holders[0].TTL},
	}}, info, "an old lease reports no metadata")
	tok, err := b.acquireMD(ctx, "old", old, time.Minute, "host=b")
	require.NoError(t, err)
	require.Equal(t, fence.Token(41), tok)
	info, err = b.inspect(ctx, "old")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, "host=b", info.Holders[0].Metadata)
}

// The metadata column holds what the holder attached while the lease
// lives, and NULL (not an empty string, nor the last holder's) otherwise,
// so that an operator's own SELECT on the table reads the same as Inspect.
func TestMetadataColumn(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	column := func() *string {
		var md *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT metadata FROM fencekit_leases WHERE name = 'l'`).Scan(&md))
		return md
	}
	a := newOwner(t)
	_, err := b.acquireMD(ctx, "l", a, time.Minute, "it's\n\"here\"")
	require.NoError(t, err)
	require.NotNil(t, column())
	require.Equal(t, "it's\n\"here\"", *column())
	require.NoError(t, b.release(ctx, "l", a))
	require.Nil(t, column(), "Release clears the metadata")
	_, err = b.acquire(ctx, "l", newOwner(t), time.Minute)
	require.NoError(t, err)
	require.Nil(t, column(), "a holder without metadata stores NULL")
}

// Metadata with a NUL byte is refused before any statement is sent (text
// columns cannot hold NUL): by the Client, from its Options or from the
// context.
func TestMetadataRefusedBeforeSending(t *testing.T) {
	ctx := testCtx(t)
	db := &countingDB{Pool: migrated(t, testkit.Postgres(t))}
	b := postgres.NewBackend(db, nil)
	_, err := lock.New(b, &lock.Options{Metadata: "a\x00b"}).TryAcquire(ctx, "l", time.Minute)
	require.ErrorIs(t, err, fence.ErrInvalid, "Options.Metadata")
	_, err = lock.New(b, nil).TryAcquire(lock.ContextWithMetadata(ctx, "a\x00b"), "l", time.Minute)
	require.ErrorIs(t, err, fence.ErrInvalid, "ContextWithMetadata")
	require.Zero(t, db.n.Load(), "statements sent")
}

// Storing and reading metadata costs no extra statement.
func TestMetadataOneStatement(t *testing.T) {
	ctx := testCtx(t)
	db := &countingDB{Pool: migrated(t, testkit.Postgres(t))}
	b := newCalls(db, nil)
	a := newOwner(t)
	const md = "host=a pid=1"
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"Acquire with metadata", func() error { _, err := b.acquireMD(ctx, "l", a, time.Minute, md); return err }},
		{"same-owner Acquire with metadata", func() error { _, err := b.acquireMD(ctx, "l", a, time.Minute, md); return err }},
		{"Inspect", func() error {
			info, err := b.inspect(ctx, "l")
			if h, _ := holderOf(info); err == nil && h.Metadata != md {
				t.Errorf("Inspect reported metadata %q", h.Metadata)
			}
			return err
		}},
	} {
		before := db.n.Load()
		require.NoError(t, op.run(), op.name)
		require.Equal(t, int64(1), db.n.Load()-before, "%s: statements sent", op.name)
	}
}

// Migrating a current schema takes no table lock: it completes while
// another transaction that read the lease table is still open (an operator's
// psql session, say), instead of waiting for it and making every lease
// operation queue behind it.
func TestMigrateCurrentSchemaTakesNoLock(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	reader, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = reader.Rollback(ctx) }()
	var n int
	require.NoError(t, reader.QueryRow(ctx, `SELECT count(*) FROM fencekit_leases`).Scan(&n))

	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, postgres.Migrate(mctx, pool, nil), "Migrate waited for the open reader")
}
