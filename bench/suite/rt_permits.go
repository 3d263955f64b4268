package suite

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/lock"
)

// permitRTCases are the round-trip cases of semaphores and read-write locks
// (issue 23, shapes 2 and 3) on store, each a permit taken with one attempt
// and released, next to their baseline, one name taken with TryAcquire and
// released, through the Client that fk returns. On a backend that cannot
// offer permits (its Acquire answers driver.ErrUnsupported for them) the
// permit cases fail their warm-up with lock.ErrUnsupported, which
// measureCase reports as Unsupported.
//
// The semaphore has 2 permits and the read-write lock another reader while
// the operation is counted, so that the permit is granted next to a live
// one, not on an idle name.
func permitRTCases(store, keyPart string, fk func(*RTEnv) *lock.Client) []RTCase {
	cycle := func(ctx context.Context, take func() (*lock.Lease, error)) error {
		l, err := take()
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	// withOther holds one permit from take while the cycle of another is
	// counted.
	withOther := func(ctx context.Context, r *RTEnv, take func() (*lock.Lease, error)) error {
		other, err := take()
		if err != nil {
			return err
		}
		defer other.Release(context.WithoutCancel(ctx)) //nolint:errcheck
		return r.Measure(func() error { return cycle(ctx, take) })
	}
	return []RTCase{
		{Store: store, Op: OpLockCycle, Lib: "fencekit TryAcquire + Release", Run: func(ctx context.Context, r *RTEnv) error {
			c, name := fk(r), r.Key("rt", keyPart, "one")
			return r.Measure(func() error {
				return cycle(ctx, func() (*lock.Lease, error) { return c.TryAcquire(ctx, name, TTL) })
			})
		}},
		{Store: store, Op: OpSemaphore, Lib: "fencekit Semaphore.TryAcquire + Release (2 permits, 1 other held)", Run: func(ctx context.Context, r *RTEnv) error {
			sem := fk(r).Semaphore(r.Key("rt", keyPart, "sem"), 2)
			return withOther(ctx, r, func() (*lock.Lease, error) { return sem.TryAcquire(ctx, TTL) })
		}},
		{Store: store, Op: OpReadPermit, Lib: "fencekit RWLock.TryAcquireRead + Release (1 other reader)", Run: func(ctx context.Context, r *RTEnv) error {
			rw := fk(r).RWLock(r.Key("rt", keyPart, "rw-read"))
			return withOther(ctx, r, func() (*lock.Lease, error) { return rw.TryAcquireRead(ctx, TTL) })
		}},
		{Store: store, Op: OpWritePermit, Lib: "fencekit RWLock.TryAcquireWrite + Release", Run: func(ctx context.Context, r *RTEnv) error {
			rw := fk(r).RWLock(r.Key("rt", keyPart, "rw-write"))
			var w *lock.Lease
			err := r.Measure(func() error {
				return cycle(ctx, func() (l *lock.Lease, err error) { w, err = rw.TryAcquireWrite(ctx, TTL); return w, err })
			})
			// Each write permit follows the last: its prior writer is an
			// older token.
			if err == nil && w.PriorWriter() >= w.Token() {
				err = fmt.Errorf("write permit token %d not above its prior writer %d: %w", w.Token(), w.PriorWriter(), errUnexpected)
			}
			return err
		}},
	}
}
