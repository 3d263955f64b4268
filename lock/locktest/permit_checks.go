package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Durations of the permit checks: places are renewed rarely (a third of
// permitPlaceTTL), so a waiter served well within waitFor was woken.
const (
	permitPlaceTTL = 30 * time.Second
	permitShortTTL = 300 * time.Millisecond // a permit that is left to expire
)

// PermitChecks returns the checks of the optional capability
// lock.PermitBackend (semaphores and read-write locks). Each fails at once
// on a backend without it.
func PermitChecks() []Check {
	return []Check{
		{"SemaphoreGrantsAtMostLimit", checkSemaphoreLimit},
		{"SemaphoreNeverOverLimitUnderContention", checkSemaphoreContention},
		{"SemaphoreRefusesAnotherLimit", checkSemaphoreShape},
		{"SemaphoreServesInArrivalOrder", checkSemaphoreOrder},
		{"SemaphorePermitExpires", checkPermitExpires},
		{"PermitTryDoesNotJumpTheLine", checkPermitNoJump},
		{"PermitSameOwnerKeepsToken", checkPermitSameOwner},
		{"PermitExtendNeverRecreates", checkPermitExtend},
		{"PermitLeaveLine", checkPermitLeave},
		{"PermitAwaitHonoursContext", checkPermitAwaitContext},
		{"PermitRefusesBadInput", checkPermitBadInput},
		{"PermitsApartFromLocks", checkPermitsApart},
		{"RWReadersShareWritersExclude", checkRWExclusion},
		{"RWWriterNotStarvedByReaders", checkRWWriterNotStarved},
		{"RWReaderLearnsPriorWriter", checkRWPriorWriter},
		{"RWTokensRiseAcrossKinds", checkRWTokensRise},
	}
}

// RunPermits runs PermitChecks as subtests of t. Run calls it when the
// backend that newBackend returns implements lock.PermitBackend.
func RunPermits(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	runChecks(t, PermitChecks(), newBackend)
}

func asPermits(b lock.Backend) (lock.PermitBackend, error) {
	p, ok := b.(lock.PermitBackend)
	if !ok {
		return nil, fmt.Errorf("%T does not implement lock.PermitBackend", b)
	}
	return p, nil
}

func semaphoreReq(n int, ttl, place time.Duration) lock.PermitRequest {
	return lock.PermitRequest{Kind: lock.SemaphorePermit, Limit: n, TTL: ttl, Place: place}
}

// permitClient is a Client whose waiters renew their places rarely.
func permitClient(b lock.Backend) *lock.Client {
	return lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: permitPlaceTTL}})
}

// checkSemaphoreLimit: N permits are granted, the N+1-th is refused, and a
// release lets one more in, with a greater token.
func checkSemaphoreLimit(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	s := permitClient(b).Semaphore(ns+"sem", 3)
	var leases []*lock.Lease
	var last fence.Token
	for i := range 3 {
		l, err := s.TryAcquire(ctx, longTTL)
		if err != nil {
			return fmt.Errorf("permit %d of 3: %w", i+1, err)
		}
		if l.Token() <= last {
			return fmt.Errorf("permit %d has token %d, not above %d", i+1, l.Token(), last)
		}
		last = l.Token()
		leases = append(leases, l)
	}
	if l, err := s.TryAcquire(ctx, longTTL); err == nil {
		return fmt.Errorf("a 4th permit of 3 was granted (token %d)", l.Token())
	} else if err := expectIs("the 4th TryAcquire", err, lock.ErrHeld); err != nil {
		return err
	}
	if ps, err := s.Inspect(ctx); err != nil {
		return err
	} else if len(ps.Holders) != 3 || ps.Kind != lock.SemaphorePermit || ps.Limit != 3 {
		return fmt.Errorf("Inspect: %d holders, kind %v, limit %d; want 3, semaphore, 3", len(ps.Holders), ps.Kind, ps.Limit)
	}
	if err := leases[1].Release(ctx); err != nil {
		return err
	}
	l, err := s.TryAcquire(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("after a release: %w", err)
	}
	if l.Token() <= last {
		return fmt.Errorf("the permit after a release has token %d, not above %d", l.Token(), last)
	}
	for _, l := range append(leases, l) {
		_ = l.Release(ctx)
	}
	return nil
}

// checkSemaphoreContention: many workers through Semaphore.Do, and never
// more than N of them inside at once.
func checkSemaphoreContention(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	const n, workers, rounds = 3, 12, 4
	s := permitClient(b).Semaphore(ns+"sem", n)
	var inside, most, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := s.Do(ctx, longTTL, func(ctx context.Context, _ *lock.Lease) error {
					now := inside.Add(1)
					defer inside.Add(-1)
					for {
						m := most.Load()
						if now <= m || most.CompareAndSwap(m, now) {
							break
						}
					}
					return sleep(ctx, 2*time.Millisecond)
				})
				if err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("Semaphore.Do: %w", err)
	}
	if most.Load() > n {
		return fmt.Errorf("%d workers held a permit of %d at once", most.Load(), n)
	}
	if done.Load() != workers*rounds {
		return fmt.Errorf("%d of %d rounds ran", done.Load(), workers*rounds)
	}
	return nil
}

// checkSemaphoreShape: while the semaphore is in use, another limit and a
// read-write lock of the same name are refused and change nothing; once it
// is idle, another limit is taken.
func checkSemaphoreShape(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	c := permitClient(b)
	name := ns + "sem"
	l, err := c.Semaphore(name, 3).TryAcquire(ctx, longTTL)
	if err != nil {
		return err
	}
	if _, err := c.Semaphore(name, 4).TryAcquire(ctx, longTTL); !errors.Is(err, lock.ErrShapeMismatch) {
		return fmt.Errorf("a semaphore of 3 asked for as one of 4: %v; want ErrShapeMismatch", err)
	}
	if _, err := pb.AcquirePermit(ctx, name, owner(), semaphoreReq(4, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrShapeMismatch) {
		return fmt.Errorf("AcquirePermit with another limit and a place: %v; want ErrShapeMismatch", err)
	}
	if _, err := c.RWLock(name).TryAcquireRead(ctx, longTTL); !errors.Is(err, lock.ErrShapeMismatch) {
		return fmt.Errorf("a semaphore asked for as a read-write lock: %v; want ErrShapeMismatch", err)
	}
	ps, err := pb.InspectPermits(ctx, name)
	if err != nil {
		return err
	}
	if len(ps.Holders) != 1 || ps.Waiting != 0 || ps.Limit != 3 {
		return fmt.Errorf("after the refusals: %d holders, %d waiting, limit %d; want 1, 0, 3", len(ps.Holders), ps.Waiting, ps.Limit)
	}
	if err := l.Release(ctx); err != nil {
		return err
	}
	l4, err := c.Semaphore(name, 4).TryAcquire(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("an idle semaphore asked for with another limit: %w", err)
	}
	if l4.Token() <= l.Token() {
		return fmt.Errorf("token %d after a new limit, not above %d", l4.Token(), l.Token())
	}
	return l4.Release(ctx)
}

// startPermitWaiter starts acquire in the background, its place renewed
// rarely, and returns once it is in line (its first attempt refused) or it
// returned.
func startPermitWaiter(ctx context.Context, acquire func(ctx context.Context, c *lock.Client) (*lock.Lease, error), b lock.Backend) (*waiter, error) {
	return startAcquirer(ctx, b, permitPlaceTTL, acquire, nil)
}

// checkSemaphoreOrder: with one permit held, waiters are served in the
// order they arrived, each woken by the release before it.
func checkSemaphoreOrder(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	name := ns + "sem"
	holder, err := permitClient(b).Semaphore(name, 1).TryAcquire(ctx, longTTL)
	if err != nil {
		return err
	}
	var ws []*waiter
	for range 3 {
		w, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
			return c.Semaphore(name, 1).Acquire(ctx, longTTL)
		}, b)
		if err != nil {
			return err
		}
		ws = append(ws, w)
	}
	prev := holder
	for i, w := range ws {
		if err := prev.Release(ctx); err != nil {
			return err
		}
		l, err := w.served(ctx, fmt.Sprintf("waiter %d", i+1))
		if err != nil {
			return err
		}
		for j, later := range ws[i+1:] {
			if !later.waiting() {
				return fmt.Errorf("waiter %d was served before waiter %d", i+j+2, i+1)
			}
		}
		if l.Token() <= prev.Token() {
			return fmt.Errorf("waiter %d has token %d, not above %d", i+1, l.Token(), prev.Token())
		}
		prev = l
	}
	return prev.Release(ctx)
}

// checkPermitExpires: a permit that is not renewed expires, and the waiter
// in line gets it with a greater token.
func checkPermitExpires(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "sem"
	dead := owner()
	p, err := pb.AcquirePermit(ctx, name, dead, semaphoreReq(1, permitShortTTL, 0))
	if err != nil {
		return err
	}
	w, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.Semaphore(name, 1).Acquire(ctx, longTTL)
	}, b)
	if err != nil {
		return err
	}
	l, err := w.served(ctx, "the waiter behind an expiring permit")
	if err != nil {
		return err
	}
	if l.Token() <= p.Token {
		return fmt.Errorf("token %d after expiry, not above %d", l.Token(), p.Token)
	}
	if err := expectIs("ExtendPermit of the expired permit", pb.ExtendPermit(ctx, name, dead, longTTL), lock.ErrNotHeld); err != nil {
		return err
	}
	return l.Release(ctx)
}

// checkPermitNoJump: an acquire without a place does not take a permit
// that a waiter in line is owed, and the waiter then gets it.
func checkPermitNoJump(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "sem"
	a, w, err := holdWithWaiter(ctx, pb, name)
	if err != nil {
		return err
	}
	if err := pb.ReleasePermit(ctx, name, a); err != nil {
		return err
	}
	if p, err := pb.AcquirePermit(ctx, name, owner(), semaphoreReq(1, longTTL, 0)); err == nil {
		return fmt.Errorf("an acquire without a place took the permit (token %d) that the waiter in line is owed", p.Token)
	} else if err := expectIs("an acquire without a place", err, lock.ErrHeld); err != nil {
		return err
	}
	if _, err := pb.AcquirePermit(ctx, name, w, semaphoreReq(1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the waiter, first in line with the permit free: %w", err)
	}
	return pb.ReleasePermit(ctx, name, w)
}

// holdWithWaiter gives the one permit of a semaphore of one called name to
// a new owner and puts another in line behind it.
func holdWithWaiter(ctx context.Context, pb lock.PermitBackend, name string) (holder, waiter string, err error) {
	holder, waiter = owner(), owner()
	if _, err := pb.AcquirePermit(ctx, name, holder, semaphoreReq(1, longTTL, 0)); err != nil {
		return "", "", err
	}
	if _, err := pb.AcquirePermit(ctx, name, waiter, semaphoreReq(1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return "", "", fmt.Errorf("AcquirePermit with a place while the permit is held: %v; want ErrHeld", err)
	}
	return holder, waiter, nil
}

// checkPermitSameOwner: an acquire by the holder extends its permit with
// the same token; asking for another kind is refused.
func checkPermitSameOwner(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "rw"
	o := owner()
	read := lock.PermitRequest{Kind: lock.ReadPermit, TTL: permitShortTTL}
	p1, err := pb.AcquirePermit(ctx, name, o, read)
	if err != nil {
		return err
	}
	read.TTL = longTTL
	p2, err := pb.AcquirePermit(ctx, name, o, read)
	if err != nil {
		return err
	}
	if p2 != p1 {
		return fmt.Errorf("a retried acquire got %+v; want the same permit %+v", p2, p1)
	}
	if err := sleep(ctx, permitShortTTL+100*time.Millisecond); err != nil {
		return err
	}
	if err := pb.ExtendPermit(ctx, name, o, longTTL); err != nil {
		return fmt.Errorf("the retried acquire did not extend the permit: %w", err)
	}
	write := lock.PermitRequest{Kind: lock.WritePermit, TTL: longTTL}
	if _, err := pb.AcquirePermit(ctx, name, o, write); !errors.Is(err, lock.ErrShapeMismatch) {
		return fmt.Errorf("a reader asking for the write permit: %v; want ErrShapeMismatch", err)
	}
	return pb.ReleasePermit(ctx, name, o)
}

// checkPermitExtend: Extend and Release of a permit that is gone are
// ErrNotHeld and bring nothing back.
func checkPermitExtend(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "sem"
	o := owner()
	if _, err := pb.AcquirePermit(ctx, name, o, semaphoreReq(2, longTTL, 0)); err != nil {
		return err
	}
	if err := pb.ReleasePermit(ctx, name, o); err != nil {
		return err
	}
	if err := expectIs("ExtendPermit after release", pb.ExtendPermit(ctx, name, o, longTTL), lock.ErrNotHeld); err != nil {
		return err
	}
	if err := expectIs("ReleasePermit twice", pb.ReleasePermit(ctx, name, o), lock.ErrNotHeld); err != nil {
		return err
	}
	if err := expectIs("ExtendPermit by a stranger", pb.ExtendPermit(ctx, name, owner(), longTTL), lock.ErrNotHeld); err != nil {
		return err
	}
	ps, err := pb.InspectPermits(ctx, name)
	if err != nil {
		return err
	}
	if len(ps.Holders) != 0 {
		return fmt.Errorf("after release and extend: %d holders; want 0", len(ps.Holders))
	}
	return nil
}

// checkPermitLeave: LeavePermitLine removes the place, and is nil for an
// owner without one.
func checkPermitLeave(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "sem"
	a, w, err := holdWithWaiter(ctx, pb, name)
	if err != nil {
		return err
	}
	if _, err := pb.AcquirePermit(ctx, name, w, semaphoreReq(1, longTTL, permitPlaceTTL)); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("queueing again: %v; want ErrHeld", err)
	}
	if ps, err := pb.InspectPermits(ctx, name); err != nil || ps.Waiting != 1 {
		return first(err, fmt.Errorf("one waiter asked twice: %d waiting; want 1", ps.Waiting))
	}
	if err := pb.LeavePermitLine(ctx, name, w); err != nil {
		return err
	}
	if err := pb.LeavePermitLine(ctx, name, owner()); err != nil {
		return fmt.Errorf("LeavePermitLine without a place: %w", err)
	}
	if ps, err := pb.InspectPermits(ctx, name); err != nil || ps.Waiting != 0 {
		return first(err, fmt.Errorf("after LeavePermitLine: %d waiting; want 0", ps.Waiting))
	}
	return pb.ReleasePermit(ctx, name, a)
}

// checkPermitAwaitContext: AwaitPermit returns the context's error when
// the context ends.
func checkPermitAwaitContext(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "sem"
	a, w, err := holdWithWaiter(ctx, pb, name)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = pb.AwaitPermit(actx, name, w, longTTL)
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("AwaitPermit past its context's deadline: %v; want context.DeadlineExceeded", err)
	}
	_ = pb.LeavePermitLine(ctx, name, w)
	return pb.ReleasePermit(ctx, name, a)
}

// checkPermitBadInput: bad requests are ErrInvalid and write nothing.
func checkPermitBadInput(ctx context.Context, b lock.Backend, ns string) error {
	pb, err := asPermits(b)
	if err != nil {
		return err
	}
	name := ns + "sem"
	bad := map[string]lock.PermitRequest{
		"limit 0":              semaphoreReq(0, longTTL, 0),
		"limit above the most": semaphoreReq(lock.MaxPermits+1, longTTL, 0),
		"no kind":              {TTL: longTTL},
		"a reader with limit":  {Kind: lock.ReadPermit, Limit: 2, TTL: longTTL},
		"ttl below MinTTL":     semaphoreReq(1, 0, 0),
		"place below minimum":  semaphoreReq(1, longTTL, lock.MinPlaceTTL/2),
	}
	for what, req := range bad {
		if _, err := pb.AcquirePermit(ctx, name, owner(), req); !errors.Is(err, lock.ErrInvalid) {
			return fmt.Errorf("AcquirePermit, %s: %v; want ErrInvalid", what, err)
		}
	}
	if _, err := pb.AcquirePermit(ctx, "", owner(), semaphoreReq(1, longTTL, 0)); !errors.Is(err, lock.ErrInvalid) {
		return fmt.Errorf("AcquirePermit of an empty name: %v; want ErrInvalid", err)
	}
	if err := pb.ExtendPermit(ctx, name, "", longTTL); !errors.Is(err, lock.ErrInvalid) {
		return fmt.Errorf("ExtendPermit of an empty owner: %v; want ErrInvalid", err)
	}
	ps, err := pb.InspectPermits(ctx, name)
	if err != nil {
		return err
	}
	if ps.Kind != 0 || len(ps.Holders) != 0 || ps.Waiting != 0 {
		return fmt.Errorf("after refused requests: kind %v, %d holders, %d waiting; want nothing", ps.Kind, len(ps.Holders), ps.Waiting)
	}
	return nil
}

// checkPermitsApart: a lock and a semaphore of the same name do not block
// each other.
func checkPermitsApart(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	c := permitClient(b)
	name := ns + "x"
	l, err := c.TryAcquire(ctx, name, longTTL)
	if err != nil {
		return err
	}
	s, err := c.Semaphore(name, 1).TryAcquire(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("a semaphore named as a held lock: %w", err)
	}
	w, err := c.RWLock(ns+"y").TryAcquireWrite(ctx, longTTL)
	if err != nil {
		return err
	}
	l2, err := c.TryAcquire(ctx, ns+"y", longTTL)
	if err != nil {
		return fmt.Errorf("a lock named as a held read-write lock: %w", err)
	}
	return first(l.Release(ctx), s.Release(ctx), w.Release(ctx), l2.Release(ctx))
}

// checkRWExclusion: readers share, a writer excludes readers and writers.
func checkRWExclusion(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	rw := permitClient(b).RWLock(ns + "rw")
	r1, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	r2, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("a second reader: %w", err)
	}
	if _, err := rw.TryAcquireWrite(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a writer beside two readers: %v; want ErrHeld", err)
	}
	if err := first(r1.Release(ctx), r2.Release(ctx)); err != nil {
		return err
	}
	w, err := rw.TryAcquireWrite(ctx, longTTL)
	if err != nil {
		return fmt.Errorf("a writer once the readers left: %w", err)
	}
	if _, err := rw.TryAcquireRead(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a reader beside a writer: %v; want ErrHeld", err)
	}
	if _, err := rw.TryAcquireWrite(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a second writer: %v; want ErrHeld", err)
	}
	return w.Release(ctx)
}

// checkRWWriterNotStarved: once a writer waits, new readers wait behind
// it; the writer is served when the readers ahead of it leave, and the
// readers behind it after the writer.
func checkRWWriterNotStarved(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	name := ns + "rw"
	rw := permitClient(b).RWLock(name)
	r1, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	writer, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.RWLock(name).AcquireWrite(ctx, longTTL)
	}, b)
	if err != nil {
		return err
	}
	if _, err := rw.TryAcquireRead(ctx, longTTL); !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("a new reader while a writer waits: %v; want ErrHeld", err)
	}
	reader, err := startPermitWaiter(ctx, func(ctx context.Context, c *lock.Client) (*lock.Lease, error) {
		return c.RWLock(name).AcquireRead(ctx, longTTL)
	}, b)
	if err != nil {
		return err
	}
	if !reader.waiting() {
		return fmt.Errorf("a reader behind a waiting writer was served (err %v)", reader.err)
	}
	if err := r1.Release(ctx); err != nil {
		return err
	}
	w, err := writer.served(ctx, "the writer after the reader left")
	if err != nil {
		return err
	}
	if !reader.waiting() {
		return fmt.Errorf("the reader behind the writer was served while the writer holds the lock (err %v)", reader.err)
	}
	if err := w.Release(ctx); err != nil {
		return err
	}
	r, err := reader.served(ctx, "the reader after the writer")
	if err != nil {
		return err
	}
	if r.Token() <= w.Token() || r.PriorWriter() != w.Token() {
		return fmt.Errorf("the reader after the writer: token %d, prior writer %d; want above %d and %d", r.Token(), r.PriorWriter(), w.Token(), w.Token())
	}
	return r.Release(ctx)
}

// checkRWPriorWriter: a reader's PriorWriter is the newest writer before
// it, and it survives the lock going idle.
func checkRWPriorWriter(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	rw := permitClient(b).RWLock(ns + "rw")
	r0, err := rw.TryAcquireRead(ctx, longTTL)
	if err != nil {
		return err
	}
	if r0.PriorWriter() != 0 {
		return fmt.Errorf("the first reader's prior writer is %d; want 0", r0.PriorWriter())
	}
	if err := r0.Release(ctx); err != nil {
		return err
	}
	var last fence.Token
	for i := range 2 {
		w, err := rw.TryAcquireWrite(ctx, longTTL)
		if err != nil {
			return err
		}
		if w.PriorWriter() != last {
			return fmt.Errorf("writer %d's prior writer is %d; want %d", i+1, w.PriorWriter(), last)
		}
		last = w.Token()
		if err := w.Release(ctx); err != nil {
			return err
		}
		r, err := rw.TryAcquireRead(ctx, longTTL)
		if err != nil {
			return err
		}
		if r.PriorWriter() != last {
			return fmt.Errorf("the reader after writer %d has prior writer %d; want %d", i+1, r.PriorWriter(), last)
		}
		if err := r.Release(ctx); err != nil {
			return err
		}
	}
	ps, err := rw.Inspect(ctx)
	if err != nil {
		return err
	}
	if ps.LastWriter != last {
		return fmt.Errorf("Inspect: last writer %d; want %d", ps.LastWriter, last)
	}
	return nil
}

// checkRWTokensRise: tokens rise across readers and writers, and after the
// lock was idle.
func checkRWTokensRise(ctx context.Context, b lock.Backend, ns string) error {
	if _, err := asPermits(b); err != nil {
		return err
	}
	rw := permitClient(b).RWLock(ns + "rw")
	var last fence.Token
	for i, write := range []bool{false, false, true, false, true, true} {
		acquire := rw.TryAcquireRead
		if write {
			acquire = rw.TryAcquireWrite
		}
		l, err := acquire(ctx, longTTL)
		if err != nil {
			return fmt.Errorf("acquire %d: %w", i+1, err)
		}
		if l.Token() <= last {
			return fmt.Errorf("acquire %d (write %v) has token %d, not above %d", i+1, write, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}
