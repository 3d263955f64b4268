package postgres_test

import (
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestAcquireMultiRollsBack: a set with one name held is refused as a
// whole, and the transaction is rolled back: the free names stay free and
// their next tokens are the ones they would have been (the refused attempt
// minted none), while a set that is free is taken with a token per name.
func TestAcquireMultiRollsBack(t *testing.T) {
	ctx := testCtx(t)
	b := postgres.NewBackend(migrated(t, testkit.Postgres(t)), nil)
	ns := testkit.Owner(t) + "/"
	a, mid, c := ns+"a", ns+"b", ns+"c"
	o, x := newOwner(t), newOwner(t)
	ta, err := b.Acquire(ctx, a, o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, a, o))
	tx, err := b.Acquire(ctx, c, x, time.Minute)
	require.NoError(t, err)

	_, err = b.AcquireMulti(ctx, []string{a, mid, c}, o, time.Minute)
	var held *lock.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, c, held.Name)
	require.Greater(t, held.TTL, 30*time.Second)
	for _, n := range []string{a, mid} {
		info, err := b.Inspect(ctx, n)
		require.NoError(t, err)
		require.False(t, info.Held, "%q held after a refused AcquireMulti", n)
	}
	info, err := b.Inspect(ctx, c)
	require.NoError(t, err)
	require.True(t, info.Held && info.Owner == x && info.Token == tx, "the holder of %q changed: %+v", c, info)

	require.NoError(t, b.Release(ctx, c, x))
	tokens, err := b.AcquireMulti(ctx, []string{a, mid, c}, o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, ta+1, tokens[0], "a's token after a rolled-back attempt")
	require.Equal(t, tx+1, tokens[2])
	again, err := b.AcquireMulti(ctx, []string{a, mid, c}, o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, tokens, again, "a same-owner retry keeps the tokens")
	for _, n := range []string{a, mid, c} {
		require.NoError(t, b.Release(ctx, n, o))
	}
}
