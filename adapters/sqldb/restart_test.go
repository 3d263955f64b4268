package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// retry calls f until it returns an error that driver.Retryable rejects (or
// nil), for the calls right after a restart that find broken pooled
// connections.
func retry(t *testing.T, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || !driver.Retryable(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// TestRestart kills and restarts a throwaway mariadbd of its own: lease
// tokens are durable and never issued again, a Guard transaction open
// during the crash commits nothing (its fence and its writes are gone
// together, and the same token then passes), and a Put sent while the
// server is down fails with a retryable error and succeeds once retried.
func TestRestart(t *testing.T) {
	srv := testkit.NewMySQLServer(t)
	ctx := testCtx(t)
	db := testkit.OpenMySQL(t, srv.Config(t))
	opts := tables(t, db, sqldb.MySQL)
	b := newDirect(db, sqldb.MySQL, opts)
	st := sqldb.NewStore(db, sqldb.MySQL, opts)
	g := sqldb.NewGuard(sqldb.MySQL, opts)
	_, err := db.ExecContext(ctx, "CREATE TABLE work (id INT PRIMARY KEY, v INT)")
	require.NoError(t, err)

	a, c := testkit.Owner(t), testkit.Owner(t)
	tok1, err := b.Acquire(ctx, "l", a, time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, "l", a))
	tok2, err := b.Acquire(ctx, "l", c, time.Minute)
	require.NoError(t, err)
	require.True(t, tok2 > tok1, "tokens %d then %d", tok1, tok2)
	require.NoError(t, st.Put(ctx, "k", tok2, []byte("v2")))

	// A Guard transaction is open when the server crashes.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, g.Check(ctx, tx, "r", 7))
	_, err = tx.ExecContext(ctx, "INSERT INTO work VALUES (1, 7)")
	require.NoError(t, err)

	srv.Kill()
	require.Error(t, tx.Commit())
	// While the server is down a Put fails, retryably.
	down, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = st.Put(down, "k", tok2, []byte("v3"))
	cancel()
	require.Error(t, err)
	require.True(t, driver.Retryable(err), "Put with the server down: %v", err)
	srv.Start()

	// Tokens: the lease survived (c holds it, same token); the next
	// holder gets a higher one.
	var info lockInfo
	require.NoError(t, retry(t, func() (err error) { info, err = b.Inspect(ctx, "l"); return err }))
	require.True(t, info.Held && info.Owner == c && info.Token == tok2, "after restart: %+v", info)
	require.NoError(t, b.Release(ctx, "l", c))
	tok3, err := b.Acquire(ctx, "l", a, time.Minute)
	require.NoError(t, err)
	require.True(t, tok3 > tok2, "token %d after restart, issued %d before", tok3, tok2)

	// The Store kept the fence; the older token is refused, the retried
	// Put lands.
	require.ErrorIs(t, st.Put(ctx, "k", tok1, []byte("old")), fence.ErrStale)
	require.NoError(t, st.Put(ctx, "k", tok2, []byte("v3")))
	rec, err := st.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v3", string(rec.Value))

	// The crashed transaction left neither its fence nor its write.
	rec, err = st.Get(ctx, "r")
	require.ErrorIs(t, err, fence.ErrNotFound)
	require.Equal(t, fence.Token(0), rec.Fence)
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM work").Scan(&n))
	require.Equal(t, 0, n)
	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, g.Check(ctx, tx, "r", 7))
	require.NoError(t, tx.Commit())
	if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("rollback after commit: %v", err)
	}
}

// TestRestartAmbiguousPut: a Put whose reply is lost because the server
// crashed after committing it (an ambiguous outcome) fails with an error,
// not with ErrStale; once the server is back, the same Put retried with
// the same token succeeds, an older token is refused, and the fence and
// value are the Put's. The store under test reaches its own throwaway
// mariadbd through a fault proxy (interpolateParams=true, one round trip
// per call; see TestFaults); a second store connects directly and observes.
func TestRestartAmbiguousPut(t *testing.T) {
	srv := testkit.NewMySQLServer(t)
	ctx := testCtx(t)
	cfg := srv.Config(t)
	direct := testkit.OpenMySQL(t, cfg)
	opts := tables(t, direct, sqldb.MySQL)
	observer := sqldb.NewStore(direct, sqldb.MySQL, opts)

	proxy := testkit.NewProxy(t, cfg.Addr)
	pc := cfg.Clone()
	pc.InterpolateParams = true
	pc.DialFunc = proxy.Dial
	st := sqldb.NewStore(testkit.OpenMySQL(t, pc), sqldb.MySQL, opts)
	require.NoError(t, st.Put(ctx, "warm", 1, []byte("w"))) // a pooled connection

	proxy.Hold(faultproxy.Downstream)
	done := make(chan error, 1)
	go func() { done <- st.Put(ctx, "k", 9, []byte("ambiguous")) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := observer.Get(ctx, "k")
		if err == nil && rec.Fence == 9 {
			break // committed on the server; the reply is held
		}
		require.True(t, time.Now().Before(deadline), "the Put did not reach the server: %+v %v", rec, err)
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	srv.Kill()
	proxy.CutAll()
	proxy.Heal()
	err := <-done
	require.Error(t, err)
	require.NotErrorIs(t, err, fence.ErrStale)
	require.True(t, driver.Retryable(err), "ambiguous Put: %v", err)

	srv.Start()
	require.NoError(t, retry(t, func() error { return st.Put(ctx, "k", 9, []byte("ambiguous")) }))
	require.ErrorIs(t, st.Put(ctx, "k", 8, []byte("older")), fence.ErrStale)
	var rec fence.Record
	require.NoError(t, retry(t, func() (err error) { rec, err = observer.Get(ctx, "k"); return err }))
	require.Equal(t, fence.Record{Value: []byte("ambiguous"), Fence: 9}, rec)
}

// TestRestartWithWaitersQueued kills and restarts a throwaway mariadbd with
// waiters in line: they fail transiently while it is down, keep (or
// retake) their places when it is back, and are all served once the holder
// releases, each with a token above the one before.
func TestRestartWithWaitersQueued(t *testing.T) {
	srv := testkit.NewMySQLServer(t)
	ctx := testCtx(t)
	db := testkit.OpenMySQL(t, srv.Config(t))
	b := newDirect(db, sqldb.MySQL, tables(t, db, sqldb.MySQL))
	holder := testkit.Owner(t)
	first, err := b.Acquire(ctx, "l", holder, time.Minute)
	require.NoError(t, err)

	const waiters = 3
	served := make(chan fence.Token, waiters)
	failed := make(chan error, waiters)
	for range waiters {
		queued := make(chan struct{})
		var once sync.Once
		c := lock.New(b.Backend, &lock.Options{
			Queue: lock.QueueOptions{PlaceTTL: 600 * time.Millisecond},
			Observer: &lock.Observer{Retrying: func(lock.Event) {
				once.Do(func() { close(queued) })
			}},
		})
		go func() {
			l, err := c.Acquire(ctx, "l", time.Minute)
			if err != nil {
				failed <- err
				return
			}
			served <- l.Token()
			_ = l.Release(context.WithoutCancel(ctx))
		}()
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was never refused (queued)")
		}
	}

	srv.Kill()
	srv.Start()
	require.NoError(t, retry(t, func() error { return b.Release(ctx, "l", holder) }))

	prev := first
	deadline := time.After(30 * time.Second)
	for i := range waiters {
		select {
		case tok := <-served:
			require.True(t, tok > prev, "waiter %d got token %d after %d", i+1, tok, prev)
			prev = tok
		case err := <-failed:
			t.Fatalf("a waiter failed: %v", err)
		case <-deadline:
			t.Fatalf("only %d of %d waiters served", i, waiters)
		}
	}
}
