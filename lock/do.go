package lock

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Do acquires the lock name (blocking, as Acquire), keeps the lease alive,
// and runs fn with a context that is cancelled when ctx ends or the lease
// ends (lost, or released by fn). When fn is done, Do cancels fn's context,
// stops the keep-alive and releases the lease, even if ctx has ended by
// then. It does so on every exit path: if fn panics or calls runtime.Goexit,
// Do cleans up the same way and lets the panic (or Goexit) go on, so a
// caller that recovers it (as net/http does for handlers) does not leave the
// lock held.
//
// The release is bounded by ttl even if the backend ignores its context. If
// its outcome is unknown (a lost reply), Do retries it once, as
// Lease.Release allows; each of the two tries gets half the ttl.
//
// Do returns nil when fn returned nil and the lease was released, by Do or
// by fn itself. Otherwise it returns:
//
//   - fn's error, joined with the error that lost the lease when the lease
//     was lost while fn ran (then fn's work may have overlapped another
//     holder's, and only fenced writes are safe from that). If fn's error
//     already is that loss (fn returned context.Cause(ctx)), it is reported
//     once.
//   - fn's error joined with the release's error when the release failed
//     (still unknown after the retry, or the lease turned out not to be
//     held, which matches ErrNotHeld and ErrLost).
//   - the acquire error, matching ErrNotAcquired, without running fn.
func (c *Client) Do(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error) error {
	if err := c.usable(); err != nil {
		return err
	}
	if fn == nil {
		return fence.Invalid("nil function")
	}
	lease, err := c.acquire(ctx, name, ttl, c.opts.MaxAttempts, true)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit: clean up, and let it
			// go on (not recovering it is re-panicking it, stack intact).
			stop()
			cancel(errFnDidNotReturn)
			_ = releaseAfterDo(ctx, lease, ttl)
		}
	}()
	fnErr := fn(fnCtx, lease)
	returned = true
	stop()
	cancel(nil)

	ended := lease.Err() // before Release, which ends the lease in any case
	relErr := releaseAfterDo(ctx, lease, ttl)

	var errs []error
	if fnErr != nil {
		errs = append(errs, fnErr)
	}
	switch {
	case errors.Is(ended, ErrLost):
		// The loss is the news; releasing a lost lease is expected to
		// fail. Report it once, even if fn returned it.
		if !errors.Is(fnErr, ended) {
			errs = append(errs, ended)
		}
	case relErr != nil:
		errs = append(errs, relErr)
	}
	return errors.Join(errs...)
}

// errFnDidNotReturn is the cause of fn's context when fn panicked or called
// runtime.Goexit.
var errFnDidNotReturn = errors.New("lock: Do's function panicked or exited")

// releaseAfterDo releases the lease when Do's function is done: once, and
// once more if the outcome was unknown, each try bounded by half the ttl.
func releaseAfterDo(ctx context.Context, lease *Lease, ttl time.Duration) error {
	base := context.WithoutCancel(ctx)
	var err error
	for try := 0; try < 2; try++ {
		rctx, cancel := context.WithTimeout(base, ttl/2)
		err = lease.Release(rctx)
		cancel()
		if err == nil || errors.Is(err, ErrNotHeld) {
			return err
		}
	}
	return err
}
