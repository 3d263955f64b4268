package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// List returns the held locks under a prefix, with holder and metadata,
// sorted by name; free and released locks, other prefixes and the floor row
// are left out, and '%' and '_' in the prefix are plain characters.
func TestAdminList(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	admin := postgres.NewAdmin(pool, nil)

	held := map[string]string{}
	for _, name := range []string{"jobs/b", "jobs/a", "other/x", "jobs%/c"} {
		owner := newOwner(t)
		_, err := b.acquireMD(ctx, name, owner, time.Minute, "md "+name)
		require.NoError(t, err)
		held[name] = owner
	}
	freed := newOwner(t)
	_, err := b.acquire(ctx, "jobs/freed", freed, time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.release(ctx, "jobs/freed", freed))
	cycle(t, ctx, b, "jobs/swept", 1)
	sweepUntil(t, ctx, b, 2) // jobs/freed and jobs/swept: a floor row now exists

	infos, err := admin.List(ctx, "jobs/")
	require.NoError(t, err)
	require.Equal(t, 2, len(infos), infos)
	for i, name := range []string{"jobs/a", "jobs/b"} {
		got := infos[i]
		require.Equal(t, name, got.Name)
		require.True(t, got.Held(), got)
		require.Equal(t, 1, len(got.Holders), got)
		h := got.Holders[0]
		require.Equal(t, held[name], h.Owner)
		require.Equal(t, "md "+name, h.Metadata)
		require.True(t, h.Token.Valid() && h.TTL > 50*time.Second && h.TTL <= time.Minute, got)
	}
	all, err := admin.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 4, len(all), all)
	pct, err := admin.List(ctx, "jobs%")
	require.NoError(t, err)
	require.Equal(t, 1, len(pct), pct)
	require.Equal(t, "jobs%/c", pct[0].Name)
	none, err := admin.List(ctx, "jobs_")
	require.NoError(t, err)
	require.Equal(t, 0, len(none), none)
}

// snapshot copies the lease table, as a backup would.
func snapshot(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `CREATE TABLE backup_leases AS SELECT * FROM fencekit_leases`)
	require.NoError(t, err)
}

// restore puts the copy back, as restoring that backup would.
func restore(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `DELETE FROM fencekit_leases; INSERT INTO fencekit_leases SELECT * FROM backup_leases`)
	require.NoError(t, err)
}

// After a restore from a backup, the tokens minted since the backup are
// minted again (the problem); after Bump they are not, for a lock whose row
// the backup holds, for one swept after the backup (its row gone, the floor
// raised) and for a lock that is new.
func TestAdminBumpAfterRestore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	admin := postgres.NewAdmin(pool, nil)

	cycle(t, ctx, b, "kept", 3)
	cycle(t, ctx, b, "swept", 2)
	snapshot(t, ctx, pool)
	lastKept := cycle(t, ctx, b, "kept", 5)   // minted after the backup
	lastSwept := cycle(t, ctx, b, "swept", 5) // ...and then swept with the floor at its token
	sweepUntil(t, ctx, b, 2)

	restore(t, ctx, pool)
	again := cycle(t, ctx, b, "kept", 1)
	require.True(t, again <= lastKept, "without a bump, a token is minted twice: got %d, earlier %d", again, lastKept)

	restore(t, ctx, pool)
	res, err := admin.Bump(ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Rows, "kept, swept and the new floor row") // no floor row in the backup
	require.True(t, cycle(t, ctx, b, "kept", 1) > lastKept+900)
	require.True(t, cycle(t, ctx, b, "swept", 1) > lastSwept+900)
	require.True(t, cycle(t, ctx, b, "new", 1) > 1000)

	// A second bump raises the floor row too, and a live lease stays its
	// holder's: same owner, raised token, renewable.
	sweepUntil(t, ctx, b, 3)
	live := newOwner(t)
	liveTok, err := b.acquire(ctx, "live", live, time.Minute)
	require.NoError(t, err)
	res, err = admin.Bump(ctx, 1000)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Rows, "the floor row and the live lease")
	info, err := b.inspect(ctx, "live")
	require.NoError(t, err)
	h, ok := holderOf(info)
	require.True(t, ok && h.Owner == live && h.Token == liveTok+1000, info)
	require.NoError(t, b.extend(ctx, "live", live, time.Minute))
	require.NoError(t, b.release(ctx, "live", live))
	require.True(t, cycle(t, ctx, b, "live", 1) > liveTok+1000)
	require.True(t, cycle(t, ctx, b, "kept", 1) > 2000)
}

// Bump refuses a step that is not positive or would push a token past
// fence.MaxToken, and then changes nothing.
func TestAdminBumpRefuses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := migrated(t, testkit.Postgres(t))
	admin := postgres.NewAdmin(pool, nil)
	for _, by := range []int64{0, -1} {
		_, err := admin.Bump(ctx, by)
		require.ErrorIs(t, err, fence.ErrInvalid)
	}
	_, err := pool.Exec(ctx, `INSERT INTO fencekit_leases (name, token) VALUES ('high', $1)`, int64(fence.MaxToken)-5)
	require.NoError(t, err)
	_, err = admin.Bump(ctx, 10)
	require.ErrorIs(t, err, fence.ErrInvalid)
	var tok int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM fencekit_leases WHERE name = 'high'`).Scan(&tok))
	require.Equal(t, int64(fence.MaxToken)-5, tok)
	_, err = postgres.NewAdmin(nil, nil).List(ctx, "")
	require.ErrorIs(t, err, fence.ErrInvalid)
}
