package sqldb_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestResumeRoundTrips counts the round trips of a resume (an Acquire with
// Request.Resume) on MariaDB with
// go-sql-driver/mysql on one warm connection: one statement, as Extend (a
// prepare and an execute with the driver's default, one with
// interpolateParams=true), refused or not.
func TestResumeRoundTrips(t *testing.T) {
	for _, interpolate := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "interpolateParams"}[interpolate], func(t *testing.T) {
			ctx := testCtx(t)
			cfg := testkit.MySQLConfig(t)
			cfg.InterpolateParams = interpolate
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
			db.SetMaxOpenConns(1)
			b := newDirect(db, sqldb.MySQL, tables(t, db, sqldb.MySQL))
			owner, other := testkit.Owner(t), testkit.Owner(t)
			count := func(f func() error) int {
				t.Helper()
				mu.Lock()
				trips = 0
				mu.Unlock()
				require.NoError(t, f())
				mu.Lock()
				defer mu.Unlock()
				return trips
			}
			tok, err := b.Acquire(ctx, "job", owner, time.Minute)
			require.NoError(t, err)
			extend := count(func() error { return b.Extend(ctx, "job", owner, time.Minute) })
			resume := count(func() error {
				got, err := b.Resume(ctx, "job", owner, time.Minute)
				if err == nil && got != tok {
					err = errors.New("Resume changed the token")
				}
				return err
			})
			refused := count(func() error {
				if _, err := b.Resume(ctx, "job", other, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
					return errors.New("another owner resumed the lease")
				}
				return nil
			})
			t.Logf("round trips: Extend %d, Resume %d, refused Resume %d", extend, resume, refused)
			stmt := 2 // prepare + execute
			if interpolate {
				stmt = 1
			}
			require.Equal(t, stmt, extend, "Extend")
			require.Equal(t, stmt, resume, "Resume")
			require.Equal(t, stmt, refused, "refused Resume")
		})
	}
}
