package sqldb_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/adapters/postgres"
	"github.com/fencekit/fencekit/adapters/sqldb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestSharedLeaseTableWithPostgres shares one lease table between
// sqldb's PostgreSQL Backend and adapters/postgres: a row swept by
// postgres.Backend.Sweep, a bump (postgres.Admin.Bump, what fencectl bump
// runs) and a restore that lost rows and the floor are all followed by
// sqldb tokens above every token issued before for that name.
func TestSharedLeaseTableWithPostgres(t *testing.T) {
	ctx := testCtx(t)
	dsn := pgSchema(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	opts := tables(t, db, sqldb.PostgreSQL)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	popts := &postgres.Options{StoreTable: []string(opts.StoreTable), LeaseTable: []string(opts.LeaseTable)}
	sb := newDirect(db, sqldb.PostgreSQL, opts)
	pb := postgres.NewBackend(pool, popts)
	admin := postgres.NewAdmin(pool, popts)

	issued := map[string]fence.Token{}
	take := func(name string) fence.Token {
		t.Helper()
		owner := testkit.Owner(t)
		tok, err := sb.Acquire(ctx, name, owner, time.Minute)
		require.NoError(t, err)
		require.True(t, tok > issued[name], "%s: sqldb minted %d after %d had been issued", name, tok, issued[name])
		issued[name] = tok
		require.NoError(t, sb.Release(ctx, name, owner))
		return tok
	}
	for range 3 {
		take("a")
	}

	// Sweep deletes a's row and keeps its token in the floor row.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := pb.Sweep(ctx, time.Microsecond)
		require.NoError(t, err)
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "Sweep deleted nothing")
	}
	take("a")

	// A bump raises every row and the floor.
	_, err = admin.Bump(ctx, 1000)
	require.NoError(t, err)
	take("a")
	take("b")

	// A restore to a point before b's row and the floor existed, then the
	// bump the runbook prescribes: by more than any name's tokens rose
	// since that point (a's rose by 1005).
	_, err = db.ExecContext(ctx, `DELETE FROM `+pgIdent(opts.LeaseTable)+` WHERE name IN ('', 'b')`)
	require.NoError(t, err)
	_, err = admin.Bump(ctx, 100000)
	require.NoError(t, err)
	take("a")
	take("b")
}

// pgIdent quotes a one-part test table name.
func pgIdent(id sqldb.Identifier) string { return `"` + id[0] + `"` }

// On a table shared with adapters/postgres, both adapters' waiters stand in
// one line, and this adapter's Release wakes a waiter of adapters/postgres
// by NOTIFY: it is served long before its own renewal (every 10 s here).
// This adapter's waiter behind it is served next, by its re-checks.
func TestSharedQueueWithPostgres(t *testing.T) {
	ctx := testCtx(t)
	dsn := pgSchema(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	opts := tables(t, db, sqldb.PostgreSQL)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	popts := &postgres.Options{StoreTable: []string(opts.StoreTable), LeaseTable: []string(opts.LeaseTable)}
	sb := newDirect(db, sqldb.PostgreSQL, opts)
	pb := postgres.NewBackend(pool, popts)

	h := testkit.Owner(t)
	first, err := sb.Acquire(ctx, "l", h, time.Minute)
	require.NoError(t, err)
	queueOpts := &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 30 * time.Second}}
	type served struct {
		token fence.Token
		err   error
	}
	// wait starts a waiter on b and returns when it has been refused
	// refusals times.
	wait := func(b driver.Backend, refusals int) (chan served, chan struct{}) {
		done, queued := make(chan served, 1), make(chan struct{})
		var n atomic.Int32
		o := *queueOpts
		o.Observer = &lock.Observer{Retrying: func(lock.Event) {
			if n.Add(1) == int32(refusals) {
				close(queued)
			}
		}}
		c := lock.New(b, &o)
		go func() {
			l, err := c.Acquire(ctx, "l", time.Minute)
			if err != nil {
				done <- served{err: err}
				return
			}
			done <- served{token: l.Token()}
			_ = l.Release(context.WithoutCancel(ctx))
		}()
		return done, queued
	}
	// The postgres waiter's first wait opens its listening connection and
	// returns for a second attempt: after that second refusal it listens,
	// and only the release's NOTIFY can serve it within 10 s.
	pgDone, pgQueued := wait(pb, 2)
	<-pgQueued
	sqlDone, sqlQueued := wait(sb.Backend, 1)
	<-sqlQueued
	released := time.Now()
	require.NoError(t, sb.Release(ctx, "l", h))
	var got []fence.Token
	for _, ch := range []chan served{pgDone, sqlDone} {
		select {
		case s := <-ch:
			require.NoError(t, s.err)
			got = append(got, s.token)
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d of 2 not served within 5s of the release", len(got)+1)
		}
	}
	require.Less(t, time.Since(released), 5*time.Second)
	require.True(t, first < got[0] && got[0] < got[1], fmt.Sprintf("tokens %d, then %v: not served in line", first, got))
}
