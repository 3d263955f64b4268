package sqldb_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// adminServers is servers without the found-rows variant: nothing here
// reads an affected-rows count that the setting changes.
func adminServers(t *testing.T) []server {
	var out []server
	for _, s := range servers(t) {
		if s.name != "mysql-foundrows" {
			out = append(out, s)
		}
	}
	return out
}

// leaseRows counts the rows of the lease table, the floor row included.
func leaseRows(t *testing.T, db *sql.DB, opts *sqldb.Options) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(testCtx(t), "SELECT COUNT(*) FROM "+opts.LeaseTable[0]).Scan(&n))
	return n
}

// TestAdminList lists the held locks under a prefix, with owner, token,
// TTL and metadata, leaving out free ones; '%' and '_' in the prefix are
// plain characters.
func TestAdminList(t *testing.T) {
	for _, s := range adminServers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			ctx := testCtx(t)
			b := sqldb.NewBackend(db, s.d, opts)
			c := lock.New(b, &lock.Options{Metadata: "host=a pid=1"})
			held, err := c.Acquire(ctx, "jobs/b", 10*time.Second)
			require.NoError(t, err)
			_, err = c.Acquire(ctx, "jobs/a", 10*time.Second)
			require.NoError(t, err)
			_, err = c.Acquire(ctx, "jobs%x", 10*time.Second)
			require.NoError(t, err)
			_, err = c.Acquire(ctx, "other", 10*time.Second)
			require.NoError(t, err)
			freed, err := c.Acquire(ctx, "jobs/c", 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, freed.Release(ctx))

			a := sqldb.NewAdmin(db, s.d, opts)
			infos, err := a.List(ctx, "jobs/")
			require.NoError(t, err)
			require.Len(t, infos, 2)
			require.Equal(t, "jobs/a", infos[0].Name)
			got := infos[1]
			require.Len(t, got.Holders, 1)
			require.True(t, got.Holders[0].TTL > 0 && got.Holders[0].TTL <= 10*time.Second, got.Holders[0].TTL)
			got.Holders[0].TTL = 0
			require.Equal(t, lock.Info{Name: "jobs/b", Holders: []lock.Holder{{Owner: held.Owner(), Token: held.Token(), Metadata: "host=a pid=1"}}}, got)

			infos, err = a.List(ctx, "jobs%")
			require.NoError(t, err)
			require.Len(t, infos, 1)
			require.Equal(t, "jobs%x", infos[0].Name)

			infos, err = a.List(ctx, "")
			require.NoError(t, err)
			require.Len(t, infos, 4)

			_, err = sqldb.NewAdmin(db, s.d, &sqldb.Options{LeaseTable: sqldb.Identifier{"a", "b", "c"}}).List(ctx, "")
			require.ErrorIs(t, err, fence.ErrInvalid)
		})
	}
}

// TestSweepKeepsTokensRising sweeps released and expired rows, keeps held
// ones, and a swept lock's next token is above every one it had: on MySQL
// through the floor row that Sweep raises and Acquire reads.
func TestSweepKeepsTokensRising(t *testing.T) {
	for _, s := range adminServers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			ctx := testCtx(t)
			b := newDirect(db, s.d, opts)
			owner := func() string { o, err := lock.NewOwner(); require.NoError(t, err); return o }
			var last fence.Token
			for range 3 {
				o := owner()
				tok, err := b.Acquire(ctx, "swept", o, 10*time.Second)
				require.NoError(t, err)
				require.NoError(t, b.Release(ctx, "swept", o))
				last = tok
			}
			_, err := b.Acquire(ctx, "expired", owner(), time.Millisecond)
			require.NoError(t, err)
			_, err = b.Acquire(ctx, "held", owner(), 30*time.Second)
			require.NoError(t, err)
			// MySQL's Migrate makes the floor row at the start; PostgreSQL's
			// appears with the first sweep.
			require.Equal(t, 3+floorRows(t, db, opts), leaseRows(t, db, opts))

			_, err = b.Sweep(ctx, 0)
			require.ErrorIs(t, err, fence.ErrInvalid)

			// Both free rows go once they have been free for 1ms.
			deadline := time.Now().Add(10 * time.Second)
			swept := 0
			for swept < 2 && time.Now().Before(deadline) {
				n, err := b.Sweep(ctx, time.Millisecond)
				require.NoError(t, err)
				swept += n
			}
			require.Equal(t, 2, swept)
			require.Equal(t, 2, leaseRows(t, db, opts)) // held, and the floor row
			n, err := b.Sweep(ctx, time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, 0, n)

			o := owner()
			tok, err := b.Acquire(ctx, "swept", o, time.Second)
			require.NoError(t, err)
			require.Greater(t, tok, last)

			// The queued acquire (what Client.Acquire sends) reads the
			// floor too.
			require.NoError(t, b.Release(ctx, "swept", o))
			for swept = 0; swept < 1 && time.Now().Before(deadline.Add(10*time.Second)); {
				n, err := b.Sweep(ctx, time.Millisecond)
				require.NoError(t, err)
				swept += n
			}
			require.Equal(t, 1, swept)
			queued, err := b.AcquireOrEnqueue(ctx, "swept", owner(), time.Second, time.Second)
			require.NoError(t, err)
			require.Greater(t, queued, tok, "a queued acquire after a sweep")
		})
	}
}

// TestSweepUnderLoad sweeps again and again while clients take and free a
// few locks: every lock's tokens still rise strictly, in the order the
// grants were made (each grant is recorded under the name's own mutex,
// between its Acquire and Release).
func TestSweepUnderLoad(t *testing.T) {
	for _, s := range adminServers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
			defer cancel()
			b := newDirect(db, s.d, opts)
			const names, workers, rounds = 3, 4, 40
			var mu [names]sync.Mutex
			var last [names]fence.Token
			stop := make(chan struct{})
			sweeps := make(chan error, 1)
			go func() {
				for {
					select {
					case <-stop:
						sweeps <- nil
						return
					default:
					}
					if _, err := b.Sweep(ctx, time.Microsecond); err != nil {
						sweeps <- err
						return
					}
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range rounds {
						i := (w + r) % names
						name := fmt.Sprintf("load/%d", i)
						o, _ := lock.NewOwner()
						mu[i].Lock()
						tok, err := b.Acquire(ctx, name, o, 10*time.Second)
						if err == nil && tok <= last[i] {
							err = fmt.Errorf("%s: token %d after %d", name, tok, last[i])
						}
						if err == nil {
							last[i] = tok
							err = b.Release(ctx, name, o)
						}
						mu[i].Unlock()
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			require.NoError(t, <-sweeps)
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestRestoreRunbook follows docs/operations.md, "After a restore", on
// each SQL dialect: back up the lease table, issue tokens
// (on a lock in the backup, and on one created and swept after it),
// restore the backup, bump, and no token is issued twice.
func TestRestoreRunbook(t *testing.T) {
	for _, s := range adminServers(t) {
		t.Run(s.name, func(t *testing.T) {
			db := s.open(t, nil)
			opts := tables(t, db, s.d)
			ctx := testCtx(t)
			b := newDirect(db, s.d, opts)
			table := opts.LeaseTable[0]
			backup := table + "_backup"
			issued := map[string]fence.Token{}
			cycle := func(name string) {
				o, err := lock.NewOwner()
				require.NoError(t, err)
				tok, err := b.Acquire(ctx, name, o, 10*time.Second)
				require.NoError(t, err)
				require.Greater(t, tok, issued[name], "token of %s", name)
				issued[name] = tok
				require.NoError(t, b.Release(ctx, name, o))
			}
			cycle("old")
			cycle("old")
			atBackup := issued["old"]

			_, err := db.ExecContext(ctx, "CREATE TABLE "+backup+" AS SELECT * FROM "+table)
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+backup) })

			for range 3 {
				cycle("old")
				cycle("late")
			}
			// Both rows go (free for 1ms): the floor remembers their
			// tokens, until the restore forgets the floor too.
			deadline := time.Now().Add(10 * time.Second)
			for swept := 0; swept < 2 && time.Now().Before(deadline); {
				n, err := b.Sweep(ctx, time.Millisecond)
				require.NoError(t, err)
				swept += n
			}
			require.Equal(t, 1, leaseRows(t, db, opts))

			// The restore: the table as it was at the backup.
			_, err = db.ExecContext(ctx, "DELETE FROM "+table)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, "INSERT INTO "+table+" SELECT * FROM "+backup)
			require.NoError(t, err)

			a := sqldb.NewAdmin(db, s.d, opts)
			_, err = a.Bump(ctx, 0)
			require.ErrorIs(t, err, fence.ErrInvalid)
			_, err = a.Bump(ctx, int64(fence.MaxToken))
			require.ErrorIs(t, err, fence.ErrInvalid)
			res, err := a.Bump(ctx, 1000)
			require.NoError(t, err)
			// old, and the floor row (made by Bump on PostgreSQL, whose
			// backup had none; restored with the backup on MySQL).
			require.Equal(t, sqldb.BumpResult{Rows: 2, MaxToken: atBackup + 1000}, res)

			for _, name := range []string{"old", "late", "new"} {
				cycle(name)
			}
			require.Greater(t, issued["late"], fence.Token(1000))
		})
	}
}

// floorRows counts the floor row (name ”) of the lease table: 1 once it
// exists.
func floorRows(t *testing.T, db *sql.DB, opts *sqldb.Options) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(testCtx(t), "SELECT COUNT(*) FROM "+opts.LeaseTable[0]+" WHERE name = ''").Scan(&n))
	return n
}
