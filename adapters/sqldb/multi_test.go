package sqldb_test

import (
	"context"
	"database/sql"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestAcquireMultiChangesNothingWhenBusy: on every server configuration, a
// set with one name held by another owner is refused as a whole with a
// *driver.HeldError naming it and its TTL; the transaction is rolled back,
// so the names before it in sorted order (which its statements had taken)
// are free again and their next tokens are the ones they would have been:
// the refused attempt consumed none. A free set given out of order gets its
// tokens in the order given, and a same-owner retry keeps them.
func TestAcquireMultiChangesNothingWhenBusy(t *testing.T) {
	for _, s := range servers(t) {
		t.Run(s.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := s.open(t, nil)
			b := newDirect(db, s.d, tables(t, db, s.d))
			a, mid, c := "a", "b", "c"
			o, x := testkit.Owner(t), testkit.Owner(t)+"x"
			ta, err := b.Acquire(ctx, a, o, time.Minute)
			require.NoError(t, err)
			require.NoError(t, b.Release(ctx, a, o))
			tc, err := b.Acquire(ctx, c, x, time.Minute)
			require.NoError(t, err)

			// c is last in sorted order: a and b were taken in the
			// transaction before it met c.
			_, err = b.AcquireMulti(ctx, []string{c, mid, a}, o, time.Minute)
			var held *driver.HeldError
			require.ErrorAs(t, err, &held)
			require.Equal(t, c, held.Name)
			require.Greater(t, held.TTL, 30*time.Second)
			for _, n := range []string{a, mid} {
				info, err := b.Inspect(ctx, n)
				require.NoError(t, err)
				require.False(t, info.Held, "%q held after a refused AcquireMulti: %+v", n, info)
			}
			info, err := b.Inspect(ctx, c)
			require.NoError(t, err)
			require.True(t, info.Held && info.Owner == x && info.Token == tc, "the holder of %q changed: %+v", c, info)

			require.NoError(t, b.Release(ctx, c, x))
			tokens, err := b.AcquireMulti(ctx, []string{c, mid, a}, o, time.Minute)
			require.NoError(t, err)
			require.Len(t, tokens, 3)
			require.Equal(t, tc+1, tokens[0], "c's token")
			require.Equal(t, ta+1, tokens[2], "a's token after a rolled-back attempt")
			tb, err := b.Acquire(ctx, mid, o, time.Minute) // owner's own: the same token
			require.NoError(t, err)
			require.Equal(t, tb, tokens[1], "b's token")
			for i, n := range []string{c, mid, a} {
				info, err := b.Inspect(ctx, n)
				require.NoError(t, err)
				require.True(t, info.Held && info.Owner == o && info.Token == tokens[i], "%q after AcquireMulti: %+v", n, info)
			}
			again, err := b.AcquireMulti(ctx, []string{a, mid, c}, o, time.Minute)
			require.NoError(t, err)
			require.Equal(t, []int64{int64(tokens[2]), int64(tokens[1]), int64(tokens[0])},
				[]int64{int64(again[0]), int64(again[1]), int64(again[2])}, "a same-owner retry keeps the tokens")
			for _, n := range []string{a, mid, c} {
				require.NoError(t, b.Release(ctx, n, o))
			}
		})
	}
}

// TestAcquireMultiStatements counts the round trips of a set's Acquire on one
// warm connection, where each statement is one round trip (MariaDB with
// interpolateParams=true; pgx's database/sql driver, which caches its
// prepared statements): BEGIN, one statement per name, COMMIT; when a name
// is busy, the statements up to it, one read of the holder's TTL (MySQL
// only) and ROLLBACK. The Client's in-order path (over a Backend whose
// sets are not atomic: driver.ErrNotAtomic) takes one round trip per name.
func TestAcquireMultiStatements(t *testing.T) {
	for _, d := range []sqldb.Dialect{sqldb.MySQL, sqldb.PostgreSQL} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := testCtx(t)
			var (
				mu    sync.Mutex
				trips int
			)
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &tripConn{Conn: c, mu: &mu, trips: &trips}, nil
			}
			var db *sql.DB
			if d == sqldb.MySQL {
				cfg := testkit.MySQLConfig(t)
				cfg.InterpolateParams = true
				cfg.DialFunc = dial
				db = testkit.OpenMySQL(t, cfg)
			} else {
				cfg, err := pgx.ParseConfig(pgSchema(t))
				require.NoError(t, err)
				cfg.DialFunc = dial
				db = stdlib.OpenDB(*cfg)
				t.Cleanup(func() { _ = db.Close() })
			}
			db.SetMaxOpenConns(1)
			b := newDirect(db, d, tables(t, db, d))
			o, x := testkit.Owner(t), testkit.Owner(t)+"x"
			count := func(f func()) int {
				t.Helper()
				mu.Lock()
				trips = 0
				mu.Unlock()
				f()
				mu.Lock()
				defer mu.Unlock()
				return trips
			}
			names := []string{"e", "d", "c", "b", "a"}
			// Warm up: connect, prepare and cache the statements.
			_, err := b.AcquireMulti(ctx, []string{"warm"}, o, time.Minute)
			require.NoError(t, err)
			_, err = b.Acquire(ctx, "warm", x, time.Minute)
			require.ErrorIs(t, err, lock.ErrHeld)
			_, err = b.AcquireMulti(ctx, []string{"warm"}, x, time.Minute)
			require.ErrorIs(t, err, lock.ErrHeld)

			client := lock.New(b.Backend, nil)
			var set *lock.MultiLease
			n := count(func() {
				set, err = client.TryAcquireMulti(ctx, names, time.Minute)
				require.NoError(t, err)
			})
			require.Equal(t, len(names)+2, n, "round trips of a free set")
			require.NoError(t, set.Release(ctx))

			_, err = b.Acquire(ctx, "c", x, time.Minute)
			require.NoError(t, err)
			busy := 3 + 2 // BEGIN, a, b, c; ROLLBACK
			if d == sqldb.MySQL {
				busy++ // the holder's TTL
			}
			n = count(func() {
				_, err = client.TryAcquireMulti(ctx, names, time.Minute)
				require.ErrorIs(t, err, lock.ErrHeld)
			})
			require.Equal(t, busy, n, "round trips of a set refused at its third name")
			require.NoError(t, b.Release(ctx, "c", x))

			inOrder := lock.New(notAtomic{b.Backend}, nil)
			n = count(func() {
				set, err = inOrder.TryAcquireMulti(ctx, names, time.Minute)
				require.NoError(t, err)
			})
			require.Equal(t, len(names), n, "round trips of the in-order path")
			require.NoError(t, set.Release(ctx))
			t.Logf("%s, %d names: AcquireMulti %d round trips, %d when refused at the third name; in order %d", d, len(names), len(names)+2, busy, len(names))
		})
	}
}

// notAtomic is a Backend that cannot take a set in one step: its Acquire of
// a set returns driver.ErrNotAtomic, sending nothing, so that the Client
// takes the names one by one.
type notAtomic struct{ driver.Backend }

func (b notAtomic) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, driver.ErrNotAtomic
	}
	return b.Backend.Acquire(ctx, req)
}
