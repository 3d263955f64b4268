package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Sixteen contenders for a semaphore of 3, half of them polling (no
// place) and half waiting in line (woken by the releases): never more than
// 3 live permits, as counted by the contenders while they hold one and as
// the server reports it; every token is minted once; and everyone gets its
// turns. With each of pgx's query modes: the two statements of a batch are
// one implicit transaction in every one (a single Sync, or a single
// multi-statement query), so the state row's lock holds until the work
// is done.
func TestPermitSemaphoreNeverOverLimit(t *testing.T) {
	modes := map[string]pgx.QueryExecMode{
		"CacheStatement": pgx.QueryExecModeCacheStatement,
		"CacheDescribe":  pgx.QueryExecModeCacheDescribe,
		"DescribeExec":   pgx.QueryExecModeDescribeExec,
		"Exec":           pgx.QueryExecModeExec,
		"SimpleProtocol": pgx.QueryExecModeSimpleProtocol,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			cfg := migrated(t, testkit.Postgres(t)).Config()
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			defer pool.Close()
			contend(t, newCalls(pool, nil))
		})
	}
}

func contend(t *testing.T, b calls) {
	const (
		contenders = 16
		limit      = 3
		turns      = 4
	)
	ctx := testCtx(t)
	var (
		live, most, refusals atomic.Int64
		mu                   sync.Mutex
		tokens               = map[fence.Token]bool{}
		wg                   sync.WaitGroup
	)
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, err := lock.NewOwner()
			if err != nil {
				t.Error(err)
				return
			}
			req := semReq(limit)
			req.TTL = 30 * time.Second
			if i%2 == 1 {
				req.Place = 3 * time.Second
			}
			for turn := 0; turn < turns; {
				p, err := b.permit(ctx, "sem", owner, req)
				switch {
				case errors.Is(err, lock.ErrHeld):
					refusals.Add(1)
					if req.Place > 0 {
						err = b.awaitPermit(ctx, "sem", owner, req.Place/3)
					} else {
						// A poller backs off (not synchronisation: it asks
						// again either way), as lock.Client would.
						time.Sleep(2 * time.Millisecond)
						err = nil
					}
					if err != nil || ctx.Err() != nil {
						t.Errorf("contender %d waiting: %v (ctx %v)", i, err, ctx.Err())
						return
					}
					continue
				case err != nil:
					t.Errorf("contender %d: %v", i, err)
					return
				}
				turn++
				n := live.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				dup := tokens[p.Token]
				tokens[p.Token] = true
				mu.Unlock()
				info, ierr := b.inspectPermits(ctx, "sem")
				switch {
				case n > limit:
					t.Errorf("%d live permits counted by their holders; limit %d", n, limit)
				case dup:
					t.Errorf("token %d granted twice", p.Token)
				case ierr != nil:
					t.Errorf("inspect: %v", ierr)
				case len(info.Holders) > limit:
					t.Errorf("the server reports %d live permits; limit %d", len(info.Holders), limit)
				}
				live.Add(-1)
				if err := b.releasePermit(ctx, "sem", owner); err != nil {
					t.Errorf("contender %d release: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, contenders*turns, len(tokens), "permits granted")
	require.Positive(t, refusals.Load(), "refusals: the contenders never contended")
	t.Logf("%d grants, %d refusals, at most %d live at once", len(tokens), refusals.Load(), most.Load())
	info, err := b.inspectPermits(context.Background(), "sem")
	require.NoError(t, err)
	require.Empty(t, info.Holders)
	require.Zero(t, info.Waiting)
}

// A wake-up sent after a permit's Acquire returned and before its Await is
// called is not lost: the waiter's mailbox exists from the acquire on, so
// the later wait returns at once instead of at its maximum.
func TestPermitWakeBeforeAwaitIsKept(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	h, w := newOwner(t), newOwner(t)
	// Listen first (a first wait returns once LISTEN took effect).
	_, err := b.permit(ctx, "s", h, semReq(1))
	require.NoError(t, err)
	_, err = b.permit(ctx, "s", w, inLine(semReq(1), 10*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.awaitPermit(ctx, "s", w, 0))
	require.NotEqual(t, "", b.WakeChannel())

	require.NoError(t, b.releasePermit(ctx, "s", h)) // the wake-up, before the wait
	start := time.Now()
	require.NoError(t, b.awaitPermit(ctx, "s", w, 30*time.Second))
	require.Less(t, time.Since(start), 15*time.Second, "the wake-up sent before the wait was lost")
	_, err = b.permit(ctx, "s", w, inLine(semReq(1), 10*time.Second))
	require.NoError(t, err)
}

// The first Await of a permit on a Backend opens its listening connection, so a
// release before it was notified to nobody: the wait finds the place let
// in and returns at once. A place not let in waits instead (to the
// context's end here), though the connection was only just opened.
func TestPermitFirstAwaitAfterListen(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	h, w := newOwner(t), newOwner(t)
	_, err := b.permit(ctx, "s", h, semReq(1))
	require.NoError(t, err)
	_, err = b.permit(ctx, "s", w, inLine(semReq(1), 10*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.releasePermit(ctx, "s", h)) // nobody listens yet
	start := time.Now()
	require.NoError(t, b.awaitPermit(ctx, "s", w, 30*time.Second))
	require.Less(t, time.Since(start), 15*time.Second, "the release before LISTEN was missed")

	b2 := permitBackend(t)
	_, err = b2.permit(ctx, "s", h, semReq(1))
	require.NoError(t, err)
	_, err = b2.permit(ctx, "s", w, inLine(semReq(1), 10*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, b2.awaitPermit(wctx, "s", w, 30*time.Second), context.DeadlineExceeded,
		"a first wait whose place is not let in")
}

// Every call honours its context: a context that has ended sends nothing
// and changes nothing, and Await returns ctx's error when ctx ends
// while it waits.
func TestPermitHonoursContext(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	a, c := newOwner(t), newOwner(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err := b.permit(done, "s", a, semReq(1))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, b.extendPermit(done, "s", a, time.Minute), context.Canceled)
	require.ErrorIs(t, b.releasePermit(done, "s", a), context.Canceled)
	require.ErrorIs(t, b.leavePermitLine(done, "s", a), context.Canceled)
	_, err = b.inspectPermits(done, "s")
	require.ErrorIs(t, err, context.Canceled)
	info, err := b.inspectPermits(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, info.Holders, "an acquire with an ended context took a permit")

	_, err = b.permit(ctx, "s", a, semReq(1))
	require.NoError(t, err)
	_, err = b.permit(ctx, "s", c, inLine(semReq(1), 10*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.awaitPermit(ctx, "s", c, 0)) // opens the listening connection
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	start := time.Now()
	err = b.awaitPermit(wctx, "s", c, 30*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
}

// Readers and writers contending for one read-write lock, all waiting in
// line: a writer is never live beside another permit, as counted by the
// holders themselves; every contender gets its turns.
func TestPermitReadWriteExclusionUnderContention(t *testing.T) {
	const (
		contenders = 12
		turns      = 4
	)
	ctx := testCtx(t)
	b := permitBackend(t)
	var (
		readers, writers atomic.Int64
		sawShared        atomic.Bool
		wg               sync.WaitGroup
	)
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner, err := lock.NewOwner()
			if err != nil {
				t.Error(err)
				return
			}
			req := inLine(readReq, 3*time.Second)
			req.TTL = 30 * time.Second
			if i%3 == 0 {
				req.Kind = driver.Write
			}
			for turn := 0; turn < turns; {
				_, err := b.permit(ctx, "rw", owner, req)
				if errors.Is(err, lock.ErrHeld) {
					if err := b.awaitPermit(ctx, "rw", owner, req.Place/3); err != nil {
						t.Errorf("contender %d waiting: %v", i, err)
						return
					}
					continue
				}
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
					return
				}
				turn++
				if req.Kind == driver.Write {
					if w := writers.Add(1); w > 1 || readers.Load() > 0 {
						t.Errorf("a writer beside %d writers and %d readers", w-1, readers.Load())
					}
					writers.Add(-1)
				} else {
					if r := readers.Add(1); r > 1 {
						sawShared.Store(true)
					}
					if writers.Load() > 0 {
						t.Error("a reader beside a writer")
					}
					if _, err := b.inspectPermits(ctx, "rw"); err != nil { // hold a moment, on the server
						t.Error(err)
					}
					readers.Add(-1)
				}
				if err := b.releasePermit(ctx, "rw", owner); err != nil {
					t.Errorf("contender %d release: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("readers shared the lock: %v", sawShared.Load())
	info, err := b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Empty(t, info.Holders)
	require.Zero(t, info.Waiting)
}
