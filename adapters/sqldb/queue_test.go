package sqldb_test

import (
	"context"
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
)

// Migrate on the schema of the previous version (store and lease tables, no
// queue table) adds the queue table, and queued waiting works on it; before
// Migrate, an Acquire with a place falls back to one without (refused while
// the lock is held: TestQueuedAcquireWithoutQueueTablePolls).
func TestMigrateAddsQueueTable(t *testing.T) {
	for _, s := range servers(t)[:3:3] {
		if s.name == "mysql-foundrows" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			ns := testkit.Namespace(t)
			opts := &sqldb.Options{StoreTable: sqldb.Identifier{ns + "_store"}, LeaseTable: sqldb.Identifier{ns + "_leases"}}
			stmts, err := sqldb.MigrateSQL(s.d, opts)
			require.NoError(t, err)
			want := 5 // store, leases, queue, two permit tables
			if s.d == sqldb.MySQL {
				want = 6 // and the floor row
			}
			require.Equal(t, want, len(stmts))
			for _, st := range stmts[:2] { // the previous version's tables
				_, err := db.ExecContext(ctx, st)
				require.NoError(t, err)
			}
			b := newDirect(db, s.d, opts)
			h, w := testkit.Owner(t), testkit.Owner(t)
			_, err = b.Acquire(ctx, "l", h, time.Minute)
			require.NoError(t, err)
			_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			require.ErrorIs(t, err, lock.ErrHeld)
			// Release works before the queue table exists (a rolling
			// upgrade).
			require.NoError(t, b.Release(ctx, "l", h), "Release without the queue table")
			require.ErrorIs(t, b.Release(ctx, "l", h), lock.ErrNotHeld)
			_, err = b.Acquire(ctx, "l", h, time.Minute)
			require.NoError(t, err)

			require.NoError(t, sqldb.Migrate(ctx, db, s.d, opts))
			require.NoError(t, sqldb.Migrate(ctx, db, s.d, opts), "Migrate must be idempotent")
			_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			require.ErrorIs(t, err, lock.ErrHeld)
			require.NoError(t, b.Release(ctx, "l", h))
			_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Second)
			require.NoError(t, err)
			require.NoError(t, b.Release(ctx, "l", w))
		})
	}
}

// Without a wake-up, Await re-checks by itself: it returns once the
// lock is free and owner is first in line, and not before (nor before max)
// while the lock is held or others are ahead.
func TestAwaitTurnReturnsOnTurn(t *testing.T) {
	for _, s := range servers(t)[:3:3] {
		if s.name == "mysql-foundrows" {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			b := newDirect(db, s.d, tables(t, db, s.d))
			h := testkit.Owner(t)
			_, err := b.Acquire(ctx, "l", h, time.Minute)
			require.NoError(t, err)
			first, second := testkit.Owner(t), testkit.Owner(t)
			for _, w := range []string{first, second} {
				_, err := b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Minute)
				require.ErrorIs(t, err, lock.ErrHeld)
			}
			awaitTook := func(w string, max time.Duration) time.Duration {
				start := time.Now()
				require.NoError(t, b.AwaitTurn(ctx, "l", w, max))
				return time.Since(start)
			}
			took := awaitTook(first, 100*time.Millisecond)
			require.True(t, took >= 100*time.Millisecond, fmt.Sprintf("the first in line returned after %v while the lock is held", took))
			require.NoError(t, b.Release(ctx, "l", h))
			took = awaitTook(second, 100*time.Millisecond)
			require.True(t, took >= 100*time.Millisecond, fmt.Sprintf("the second in line returned after %v with the first still ahead", took))
			took = awaitTook(first, time.Minute)
			require.True(t, took < 5*time.Second, fmt.Sprintf("the first in line of a free lock returned after %v", took))
			_, err = b.AcquireOrEnqueue(ctx, "l", first, time.Minute, time.Minute)
			require.NoError(t, err)

			cctx, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, b.AwaitTurn(cctx, "l", second, time.Minute), context.Canceled)
			require.NoError(t, b.LeaveQueue(ctx, "l", second))
		})
	}
}

// A store table named as the lease table's queue table is refused before
// anything is sent.
func TestStoreTableNamedAsQueueTableRefused(t *testing.T) {
	for _, d := range []sqldb.Dialect{sqldb.MySQL, sqldb.PostgreSQL} {
		opts := &sqldb.Options{StoreTable: sqldb.Identifier{"locks_queue"}, LeaseTable: sqldb.Identifier{"locks"}}
		_, err := sqldb.MigrateSQL(d, opts)
		require.ErrorIs(t, err, fence.ErrInvalid)
	}
}

// The first waiter in line behind a long hold re-checks quickly at first
// and then at most every MaxQueuePoll: over a second, some tens of round
// trips, not hundreds.
func TestFirstInLineBacksOffToMaxQueuePoll(t *testing.T) {
	ctx := testCtx(t)
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
	h, w := testkit.Owner(t), testkit.Owner(t)
	_, err := b.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	_, err = b.AcquireOrEnqueue(ctx, "l", w, time.Minute, time.Minute)
	require.ErrorIs(t, err, lock.ErrHeld)
	mu.Lock()
	trips = 0
	mu.Unlock()
	const wait = time.Second
	require.NoError(t, b.AwaitTurn(ctx, "l", w, wait))
	mu.Lock()
	n := trips
	mu.Unlock()
	most := int(wait/sqldb.MaxQueuePoll) + 15 // the ramp from QueuePoll takes a dozen
	// At least a few: it does re-check (a loaded machine slows each one).
	require.True(t, n >= 5 && n <= most, fmt.Sprintf("%d re-checks in %v; want 5..%d", n, wait, most))
}
