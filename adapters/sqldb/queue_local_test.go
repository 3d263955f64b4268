package sqldb_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// countedMySQL is a Backend on MariaDB, one round trip per statement,
// whose round trips are counted.
func countedMySQL(t *testing.T) (direct, func() int) {
	cfg := testkit.MySQLConfig(t)
	cfg.InterpolateParams = true // one round trip per statement
	var (
		mu    sync.Mutex
		trips int
	)
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &tripConn{Conn: c, mu: &mu, trips: &trips}, nil
	}
	db := testkit.OpenMySQL(t, cfg)
	b := newDirect(db, sqldb.MySQL, tables(t, db, sqldb.MySQL))
	return b, func() int {
		mu.Lock()
		defer mu.Unlock()
		n := trips
		trips = 0
		return n
	}
}

// TestLocalWaitersRecheckOnce: of five waiters in line for one name
// through one Backend, only the one that queued first re-checks the
// server; the others wait in memory. Their re-checks together cost what
// one waiter's do (TestFirstInLineBacksOffToMaxQueuePoll's bound), where
// each would re-check on its own.
func TestLocalWaitersRecheckOnce(t *testing.T) {
	ctx := testCtx(t)
	b, trips := countedMySQL(t)
	h := testkit.Owner(t)
	_, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	ws := make([]string, 5)
	for i := range ws {
		ws[i] = testkit.Owner(t)
		_, err := b.AcquireOrEnqueue(ctx, "l", ws[i], time.Minute, time.Minute)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	trips()
	const wait = time.Second
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { require.NoError(t, b.AwaitTurn(ctx, "l", w, wait)) })
	}
	wg.Wait()
	n := trips()
	most := int(wait/sqldb.MaxQueuePoll) + 15 // as for one waiter
	require.True(t, n >= 5 && n <= most, fmt.Sprintf("%d re-checks by 5 local waiters in %v; want 5..%d", n, wait, most))
}

// TestLocalLineHandsOver: a waiter behind a local one does not re-check
// while that one is in line (its Await returns at max, having sent
// nothing); when the one ahead leaves the queue, it is woken, re-checks,
// and returns as soon as its turn comes, long before max.
func TestLocalLineHandsOver(t *testing.T) {
	ctx := testCtx(t)
	b, trips := countedMySQL(t)
	h, first, second := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	_, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	for _, w := range []string{first, second} {
		_, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Minute)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	trips()
	require.NoError(t, b.AwaitTurn(ctx, "l", second, 300*time.Millisecond))
	require.Equal(t, 0, trips(), "round trips by the waiter behind a local one")

	const max = 30 * time.Second
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- b.AwaitTurn(ctx, "l", second, max) }()
	require.NoError(t, b.LeaveQueue(ctx, "l", first))
	require.NoError(t, b.Release(ctx, "l", h))
	select {
	case err := <-done:
		require.NoError(t, err)
		require.True(t, time.Since(began) < max/2, "AwaitTurn returned after %v", time.Since(began))
	case <-time.After(max / 2):
		t.Fatalf("the waiter behind was not woken when the one ahead left")
	}
	_, err = b.AcquireOrEnqueue(ctx, "l", second, time.Minute, time.Minute)
	require.NoError(t, err)
}

// TestLocalLineSkipsDeadWaiter: a waiter that queued through this Backend
// and never came back (no Await, no Leave) leads the local line
// only until its place TTL has passed; then the waiter behind it re-checks
// by itself and is served, long before its own max.
func TestLocalLineSkipsDeadWaiter(t *testing.T) {
	ctx := testCtx(t)
	b, _ := countedMySQL(t)
	h, dead, next := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	_, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	const place = 300 * time.Millisecond
	_, err = b.AcquireOrEnqueue(ctx, "l", dead, time.Minute, place)
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = b.AcquireOrEnqueue(ctx, "l", next, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.Release(ctx, "l", h))

	const max = 30 * time.Second
	began := time.Now()
	require.NoError(t, b.AwaitTurn(ctx, "l", next, max))
	require.True(t, time.Since(began) < max/2, "AwaitTurn returned after %v", time.Since(began))
	_, err = b.AcquireOrEnqueue(ctx, "l", next, time.Minute, time.Minute)
	require.NoError(t, err)
}

// TestLocalWaiterRenewsInOneStatement: on MySQL, a waiter with another
// waiter of the same Backend ahead of it renews its place with one
// statement (the take and the position are skipped: it cannot be its
// turn), where the first in line runs the three of a refused
// acquire with a place; and when the one ahead is gone, it takes the lock.
func TestLocalWaiterRenewsInOneStatement(t *testing.T) {
	ctx := testCtx(t)
	b, trips := countedMySQL(t)
	h, first, second := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	tok, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	for _, w := range []string{first, second} {
		_, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Minute)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	trips()
	_, err = b.AcquireOrEnqueue(ctx, "l", second, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.Equal(t, 1, trips(), "round trips of the renewal behind a local waiter")
	_, err = b.AcquireOrEnqueue(ctx, "l", first, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.Equal(t, 3, trips(), "round trips of the first in line's renewal")

	require.NoError(t, b.LeaveQueue(ctx, "l", first))
	require.NoError(t, b.Release(ctx, "l", h))
	next, err := b.AcquireOrEnqueue(ctx, "l", second, time.Minute, time.Minute)
	require.NoError(t, err)
	require.Greater(t, next, tok)
}
