package sqldb_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// tripConn counts round trips: the first read after a write ends one.
// Requests the client sends without waiting for a reply (go-sql-driver/mysql's
// COM_STMT_CLOSE) join the round trip of the next request.
type tripConn struct {
	net.Conn
	mu      *sync.Mutex
	trips   *int
	written bool
}

func (c *tripConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.written = true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *tripConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if c.written && n > 0 {
		*c.trips++
		c.written = false
	}
	c.mu.Unlock()
	return n, err
}

// TestRoundTrips counts the round trips of each call on MariaDB with
// go-sql-driver/mysql, on one warm connection: with the driver's default
// (server-side prepared statements: a prepare and an execute per statement
// with arguments) and with interpolateParams=true. A refused Put costs no
// more than an applied one; Inspect of a lock reads its holder and its line
// in one statement; Guard.Check adds three statements to the
// transaction (GET_LOCK, the fenced upsert, RELEASE_LOCK: see Guard.Check).
func TestRoundTrips(t *testing.T) {
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
			opts := tables(t, db, sqldb.MySQL)
			_, err := db.ExecContext(ctx, "CREATE TABLE acct (id INT PRIMARY KEY, bal INT NOT NULL)")
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO acct VALUES (1, 0)")
			require.NoError(t, err)
			st := sqldb.NewStore(db, sqldb.MySQL, opts)
			b := newDirect(db, sqldb.MySQL, opts)
			g := sqldb.NewGuard(sqldb.MySQL, opts)
			owner := testkit.Owner(t)

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
			tx := func(guard bool) func() error {
				return func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback() //nolint:errcheck
					if guard {
						if err := g.Check(ctx, tx, "acct", 1); err != nil {
							return err
						}
					}
					if _, err := tx.ExecContext(ctx, "UPDATE acct SET bal = bal + ? WHERE id = 1", 1); err != nil {
						return err
					}
					return tx.Commit()
				}
			}
			stmt := 2 // prepare + execute
			if interpolate {
				stmt = 1
			}
			require.NoError(t, st.Put(ctx, "k", 5, []byte("v"))) // warm the connection
			require.Equal(t, stmt, count(func() error { return st.Put(ctx, "k", 5, []byte("v")) }), "Put")
			require.Equal(t, stmt, count(func() error {
				err := st.Put(ctx, "k", 4, []byte("v"))
				if !errors.Is(err, fence.ErrStale) {
					t.Fatalf("refused Put: %v", err)
				}
				return nil
			}), "refused Put")
			require.Equal(t, stmt, count(func() error { _, err := b.Acquire(ctx, "l", owner, time.Minute); return err }), "Acquire")
			require.Equal(t, stmt, count(func() error { return b.Extend(ctx, "l", owner, time.Minute) }), "Extend")
			require.Equal(t, stmt, count(func() error { _, err := b.Inspect(ctx, "l"); return err }), "Inspect (holder and line)")
			require.Equal(t, stmt, count(func() error { return b.Release(ctx, "l", owner) }), "Release")
			// Queued waiting (an Acquire with a place) with nobody waiting:
			// the take alone.
			require.Equal(t, stmt, count(func() error {
				_, err := b.AcquireOrEnqueue(ctx, "q", owner, time.Minute, time.Second)
				return err
			}), "AcquireOrEnqueue of a free lock")
			require.Equal(t, stmt, count(func() error { return b.Release(ctx, "q", owner) }), "Release after AcquireOrEnqueue")
			plain, guarded := count(tx(false)), count(tx(true))
			require.Equal(t, 2+stmt, plain, "plain transaction")
			require.Equal(t, 2+4*stmt, guarded, "guarded transaction")
			t.Logf("round trips: statement %d, transaction %d, guarded transaction %d", stmt, plain, guarded)
		})
	}
}
