package postgres_test

import (
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Permit requests of each kind, for a minute, without a place in line
// unless the test adds one.
var (
	readReq  = driver.Request{Kind: driver.Read, TTL: time.Minute}
	writeReq = driver.Request{Kind: driver.Write, TTL: time.Minute}
)

func semReq(limit int) driver.Request {
	return driver.Request{Kind: driver.Semaphore, Limit: limit, TTL: time.Minute}
}

func inLine(req driver.Request, place time.Duration) driver.Request {
	req.Place = place
	return req
}

func permitBackend(t *testing.T) calls {
	t.Helper()
	return newCalls(migrated(t, testkit.Postgres(t)), nil)
}

// A reader is refused beside a writer and a writer beside readers; readers
// share; every grant's token is above every earlier one whatever the kind,
// and PriorWriter is the newest writer's token before the grant.
func TestPermitReadWrite(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	r1, r2, w, r3 := newOwner(t), newOwner(t), newOwner(t), newOwner(t)

	p1, err := b.permit(ctx, "rw", r1, readReq)
	require.NoError(t, err)
	p2, err := b.permit(ctx, "rw", r2, readReq)
	require.NoError(t, err, "a second reader")
	require.Greater(t, p2.Token, p1.Token)
	require.Zero(t, p1.PriorWriter)

	_, err = b.permit(ctx, "rw", w, writeReq)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held, "a writer beside readers")
	require.Greater(t, held.TTL, 30*time.Second, "the earliest permit's remaining TTL")

	require.NoError(t, b.releasePermit(ctx, "rw", r1))
	require.NoError(t, b.releasePermit(ctx, "rw", r2))
	pw, err := b.permit(ctx, "rw", w, writeReq)
	require.NoError(t, err)
	require.Greater(t, pw.Token, p2.Token)
	require.Zero(t, pw.PriorWriter)

	_, err = b.permit(ctx, "rw", r3, readReq)
	require.ErrorIs(t, err, lock.ErrHeld, "a reader beside a writer")
	info, err := b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Equal(t, driver.Write, info.Kind)
	require.Len(t, info.Holders, 1)
	require.Equal(t, w, info.Holders[0].Owner)
	require.Equal(t, pw.Token, info.Holders[0].Token)
	require.Equal(t, pw.Token, info.LastWriter)

	require.NoError(t, b.releasePermit(ctx, "rw", w))
	require.ErrorIs(t, b.releasePermit(ctx, "rw", w), lock.ErrNotHeld, "a second release")
	p3, err := b.permit(ctx, "rw", r3, readReq)
	require.NoError(t, err)
	require.Greater(t, p3.Token, pw.Token)
	require.Equal(t, pw.Token, p3.PriorWriter, "the reader after the writer")
}

// A writer in line holds back new readers (with or without a place), so
// that a stream of readers cannot starve it; when the last reader leaves,
// the writer is woken and admitted, and the readers after it.
func TestPermitWaitingWriterBlocksNewReaders(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	r1, w, r2, r3 := newOwner(t), newOwner(t), newOwner(t), newOwner(t)
	_, err := b.permit(ctx, "rw", r1, readReq)
	require.NoError(t, err)
	_, err = b.permit(ctx, "rw", w, inLine(writeReq, 5*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = b.permit(ctx, "rw", r2, readReq)
	require.ErrorIs(t, err, lock.ErrHeld, "a reader without a place, behind a waiting writer")
	_, err = b.permit(ctx, "rw", r3, inLine(readReq, 5*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld, "a reader in line behind a waiting writer")
	info, err := b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Equal(t, 2, info.Waiting)
	require.Len(t, info.Holders, 1)

	// The writer's first wait opens the listening connection and returns.
	require.NoError(t, b.awaitPermit(ctx, "rw", w, 0))
	woken := make(chan error, 1)
	go func() { woken <- b.awaitPermit(ctx, "rw", w, 30*time.Second) }()
	start := time.Now()
	require.NoError(t, b.releasePermit(ctx, "rw", r1))
	require.NoError(t, <-woken)
	require.Less(t, time.Since(start), 15*time.Second, "the writer was not woken by the release")
	pw, err := b.permit(ctx, "rw", w, inLine(writeReq, 5*time.Second))
	require.NoError(t, err)
	_, err = b.permit(ctx, "rw", r3, inLine(readReq, 5*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld, "a reader beside the writer")
	require.NoError(t, b.releasePermit(ctx, "rw", w))
	p3, err := b.permit(ctx, "rw", r3, inLine(readReq, 5*time.Second))
	require.NoError(t, err)
	require.Equal(t, pw.Token, p3.PriorWriter)
	info, err = b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Zero(t, info.Waiting, "the admitted waiters' places")
}

// The token counter and the last writer outlive every shape: a name used
// as a semaphore, then (once idle) as a read-write lock, then as a
// semaphore of another limit keeps minting greater tokens. A single-name
// lock of the same name is apart: it neither blocks nor shares tokens.
func TestPermitTokensRiseAcrossKindsAndShapes(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	var last fence.Token
	take := func(owner string, req driver.Request) driver.Grant {
		t.Helper()
		p, err := b.permit(ctx, "x", owner, req)
		require.NoError(t, err)
		require.Greater(t, p.Token, last)
		last = p.Token
		return p
	}
	a, c := newOwner(t), newOwner(t)
	take(a, semReq(2))
	take(c, semReq(2))
	require.NoError(t, b.releasePermit(ctx, "x", a))
	require.NoError(t, b.releasePermit(ctx, "x", c))
	w := take(a, writeReq)
	require.NoError(t, b.releasePermit(ctx, "x", a))
	r := take(c, readReq)
	require.Equal(t, w.Token, r.PriorWriter)
	require.NoError(t, b.releasePermit(ctx, "x", c))
	s := take(a, semReq(5))
	require.Equal(t, w.Token, s.PriorWriter, "the last writer outlives the shape")

	// The single-name lock "x" is free, and its tokens are its own.
	lt, err := b.acquire(ctx, "x", c, time.Minute)
	require.NoError(t, err)
	require.Equal(t, fence.Token(1), lt)
	info, err := b.inspectPermits(ctx, "x")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, a, info.Holders[0].Owner)
}

// A retried acquire by the holder extends its permit and returns the same
// token and prior writer; a permit of another kind, or another shape while
// the name is busy, is ErrShapeMismatch and changes nothing; once idle the
// name takes any shape.
func TestPermitShapes(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	a, c := newOwner(t), newOwner(t)
	first, err := b.permit(ctx, "rw", a, driver.Request{Kind: driver.Write, TTL: 2 * time.Second})
	require.NoError(t, err)
	again, err := b.permit(ctx, "rw", a, writeReq)
	require.NoError(t, err)
	require.Equal(t, first, again, "a retried acquire")
	info, err := b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Greater(t, info.Holders[0].TTL, 30*time.Second, "the retry extended the permit")

	_, err = b.permit(ctx, "rw", a, readReq)
	require.ErrorIs(t, err, lock.ErrShapeMismatch, "the writer asking to read")
	_, err = b.permit(ctx, "rw", c, inLine(semReq(3), time.Second))
	require.ErrorIs(t, err, lock.ErrShapeMismatch, "a semaphore on a read-write lock")
	after, err := b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Equal(t, info.Holders[0].Token, after.Holders[0].Token)
	require.Zero(t, after.Waiting, "a refused shape took a place")

	_, err = b.permit(ctx, "s", a, semReq(3))
	require.NoError(t, err)
	for _, req := range []driver.Request{semReq(2), readReq, writeReq} {
		_, err = b.permit(ctx, "s", c, req)
		require.ErrorIs(t, err, lock.ErrShapeMismatch, "%+v on a semaphore of 3", req)
	}
	require.NoError(t, b.releasePermit(ctx, "s", a))
	_, err = b.permit(ctx, "s", c, readReq)
	require.NoError(t, err, "an idle name takes another shape")
	info, err = b.inspectPermits(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, driver.Write, info.Kind, "a read-write lock's shape")
	require.Zero(t, info.Limit)
}

// Expiry is decided by the database clock: a permit whose expires_at the
// server's clock has passed is gone for Extend, Inspect and the next
// acquire (here the row is aged on the server, as time passing there
// would), and a short TTL ends on its own.
func TestPermitExpiryOnServerClock(t *testing.T) {
	ctx := testCtx(t)
	pool := migrated(t, testkit.Postgres(t))
	b := newCalls(pool, nil)
	a, c := newOwner(t), newOwner(t)
	pa, err := b.permit(ctx, "s", a, semReq(1))
	require.NoError(t, err)
	_, err = b.permit(ctx, "s", c, semReq(1))
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = pool.Exec(ctx, `UPDATE fencekit_leases_permit_holders SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE owner = $1`, a)
	require.NoError(t, err)
	require.ErrorIs(t, b.extendPermit(ctx, "s", a, time.Minute), lock.ErrNotHeld, "Extend of an expired permit")
	info, err := b.inspectPermits(ctx, "s")
	require.NoError(t, err)
	require.Empty(t, info.Holders)
	require.Zero(t, info.Kind, "an idle name's shape")
	pc, err := b.permit(ctx, "s", c, semReq(1))
	require.NoError(t, err)
	require.Greater(t, pc.Token, pa.Token)
	require.ErrorIs(t, b.releasePermit(ctx, "s", a), lock.ErrNotHeld, "Release of an expired permit")

	short := driver.Request{Kind: driver.Write, TTL: 300 * time.Millisecond}
	_, err = b.permit(ctx, "w", a, short)
	require.NoError(t, err)
	_, err = b.permit(ctx, "w", c, writeReq)
	var held *driver.HeldError
	require.ErrorAs(t, err, &held)
	require.LessOrEqual(t, held.TTL, 300*time.Millisecond)
	poll(t, "the short permit's expiry", func() bool {
		_, err := b.permit(ctx, "w", c, writeReq)
		return err == nil
	})

	// A place expires too: a writer's place that is not renewed stops
	// holding back readers.
	_, err = b.permit(ctx, "q", a, readReq)
	require.NoError(t, err)
	_, err = b.permit(ctx, "q", c, inLine(writeReq, 50*time.Millisecond))
	require.ErrorIs(t, err, lock.ErrHeld)
	poll(t, "the writer's place expiry", func() bool {
		_, err := b.permit(ctx, "q", newOwner(t), readReq)
		return err == nil
	})
}

// Leaving the line removes the place (a second leave is a no-op) and wakes
// whom it lets in: readers queued behind a writer that gives up.
func TestPermitLeaveLine(t *testing.T) {
	ctx := testCtx(t)
	b := permitBackend(t)
	r1, w, r2 := newOwner(t), newOwner(t), newOwner(t)
	_, err := b.permit(ctx, "rw", r1, readReq)
	require.NoError(t, err)
	_, err = b.permit(ctx, "rw", w, inLine(writeReq, 5*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	_, err = b.permit(ctx, "rw", r2, inLine(readReq, 5*time.Second))
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, b.awaitPermit(ctx, "rw", r2, 0)) // opens the listening connection
	woken := make(chan error, 1)
	go func() { woken <- b.awaitPermit(ctx, "rw", r2, 30*time.Second) }()
	start := time.Now()
	require.NoError(t, b.leavePermitLine(ctx, "rw", w))
	require.NoError(t, b.leavePermitLine(ctx, "rw", w), "a second leave")
	require.NoError(t, <-woken)
	require.Less(t, time.Since(start), 15*time.Second, "the reader was not woken")
	_, err = b.permit(ctx, "rw", r2, inLine(readReq, 5*time.Second))
	require.NoError(t, err)
	info, err := b.inspectPermits(ctx, "rw")
	require.NoError(t, err)
	require.Len(t, info.Holders, 2)
	require.Zero(t, info.Waiting)
}
