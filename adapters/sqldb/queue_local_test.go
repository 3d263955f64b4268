package sqldb_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
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

// waitInLine waits in name's line for owner as a lock.Client does: an
// acquire that keeps owner's place, then an Await of a third of the place
// TTL (or of the holder's TTL, when owner is first and that is shorter),
// until it takes the lock or ctx ends.
func waitInLine(ctx context.Context, b direct, name, owner string, place time.Duration) (fence.Token, error) {
	for {
		tok, err := b.AcquireOrEnqueue(ctx, name, owner, time.Minute, place)
		var he *driver.HeldError
		if !errors.As(err, &he) {
			return tok, err
		}
		wait := place / 3
		if he.TTL > 0 && he.TTL < wait {
			wait = he.TTL
		}
		if err := b.AwaitTurn(ctx, name, owner, wait); err != nil {
			return 0, err
		}
	}
}

// TestLocalLeaderNoticesStallBetweenRechecks: the local line's leader is
// not first on the server (the waiter first there measured its order
// before two waiters ahead gave up, and has not re-checked since), and its
// pace puts its next re-check past its Await, so it re-checks only by its
// acquires. The lock is free. The leader must see the line stalled by
// those acquires and wake the waiter ahead, which then takes the lock;
// it used to wait for a re-check that never came while the other renewed
// its place without asking, and nobody took the lock.
func TestLocalLeaderNoticesStallBetweenRechecks(t *testing.T) {
	ctx := testCtx(t)
	db := testkit.MySQL(t)
	opts := tables(t, db, sqldb.MySQL)
	b, other := newDirect(db, sqldb.MySQL, opts), newDirect(db, sqldb.MySQL, opts)
	const place = time.Second
	h, x, l := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	tok, err := other.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	// Three waiters queue ahead of x through b: x's order is the token
	// plus 3. Then they give up, so that x is first on the server.
	gaveUp := []string{testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)}
	for _, w := range append(gaveUp, x) {
		_, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, place)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	for _, w := range gaveUp {
		require.NoError(t, b.LeaveQueue(ctx, "l", w))
	}
	// l queues behind x: its order is the token plus 1, so it leads the
	// local line. Its re-checks measure a slow turn: the token rises by
	// one (a holder that did not queue) in 700ms.
	_, err = b.AcquireOrEnqueue(ctx, "l", l, time.Minute, place)
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.AwaitTurn(ctx, "l", l, 50*time.Millisecond))
	time.Sleep(700 * time.Millisecond)
	for _, w := range []string{x, l} { // both places renewed
		_, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, place)
		require.ErrorIs(t, err, lock.ErrHeld)
	}
	require.NoError(t, other.Release(ctx, "l", h))
	h2 := testkit.Owner(t)
	tok2, err := other.Acquire(ctx, "l", h2, time.Minute)
	require.NoError(t, err)
	require.Equal(t, tok+1, tok2)
	require.NoError(t, b.AwaitTurn(ctx, "l", l, 50*time.Millisecond))
	require.NoError(t, other.Release(ctx, "l", h2))

	// The lock is free; x is first on the server. Both wait as Clients do.
	wctx, cancel := context.WithTimeout(ctx, 3*place)
	defer cancel()
	got := make(chan string, 2)
	for _, o := range []string{x, l} {
		go func() {
			if _, err := waitInLine(wctx, b, "l", o, place); err == nil {
				got <- o
				_ = b.Release(ctx, "l", o)
			}
		}()
	}
	select {
	case o := <-got:
		require.Equal(t, x, o, "the waiter behind took the lock first")
	case <-wctx.Done():
		t.Fatalf("nobody took the free lock within %v", 3*place)
	}
}
