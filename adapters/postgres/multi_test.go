package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestAcquireSetRollsBack: a set with one name held is refused as a
// whole, and the transaction is rolled back: the free names stay free and
// their next tokens are the ones they would have been (the refused attempt
// minted none), while a set that is free is taken with a token per name.
func TestAcquireSetRollsBack(t *testing.T) {
	ctx := testCtx(t)
	b := newCalls(migrated(t, testkit.Postgres(t)), nil)
	ns := testkit.Owner(t) + "/"
	a, mid, c := ns+"a", ns+"b", ns+"c"
	o, x := newOwner(t), newOwner(t)
	ta, err := b.acquire(ctx, a, o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.release(ctx, a, o))
	tx, err := b.acquire(ctx, c, x, time.Minute)
	require.NoError(t, err)

	_, err = b.acquireSet(ctx, []string{a, mid, c}, o, time.Minute)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, c, held.Name)
	require.Greater(t, held.TTL, 30*time.Second)
	for _, n := range []string{a, mid} {
		info, err := b.inspect(ctx, n)
		require.NoError(t, err)
		require.Empty(t, info.Holders, "%q held after a refused set", n)
	}
	info, err := b.inspect(ctx, c)
	require.NoError(t, err)
	h, ok := holderOf(info)
	require.True(t, ok && h.Owner == x && h.Token == tx, "the holder of %q changed: %+v", c, info)

	require.NoError(t, b.release(ctx, c, x))
	tokens, err := b.acquireSet(ctx, []string{a, mid, c}, o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, ta+1, tokens[0], "a's token after a rolled-back attempt")
	require.Equal(t, tx+1, tokens[2])
	again, err := b.acquireSet(ctx, []string{a, mid, c}, o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, tokens, again, "a same-owner retry keeps the tokens")
	reversed, err := b.acquireSet(ctx, []string{c, mid, a}, o, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []fence.Token{tokens[2], tokens[1], tokens[0]}, reversed, "the tokens in the order of the names given")
	for _, n := range []string{a, mid, c} {
		require.NoError(t, b.release(ctx, n, o))
	}
}

// Sets over the same names given in opposite orders do not deadlock: the
// rows are locked in sorted order whatever the order of Names, so each
// attempt is taken or refused as held, never aborted by the server.
func TestAcquireSetOppositeOrders(t *testing.T) {
	ctx := testCtx(t)
	b := newCalls(migrated(t, testkit.Postgres(t)), nil)
	ns := testkit.Owner(t) + "/"
	x, y := ns+"x", ns+"y"
	var wg sync.WaitGroup
	for _, names := range [][]string{{x, y}, {y, x}} {
		owner := newOwner(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, err := b.acquireSet(ctx, names, owner, time.Minute)
				if errors.Is(err, lock.ErrHeld) {
					continue
				}
				if err != nil {
					t.Errorf("set %q: %v", names, err)
					return
				}
				for _, n := range names {
					if err := b.release(ctx, n, owner); err != nil {
						t.Errorf("release %q: %v", n, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
