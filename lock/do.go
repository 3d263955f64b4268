package lock

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// Do acquires the lock name (blocking, as Acquire), keeps the lease alive
// (unless WithKeepAlive(false) is among opts), and runs fn with a context
// that is cancelled when ctx ends or the lease ends (lost, or released by
// fn), made by WithLease. opts override the Client's Options for this call,
// as for Acquire; an invalid one gets ErrInvalid, fn is not run and nothing
// is sent. When fn is done, Do cancels fn's context,
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
func (c *Client) Do(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...CallOption) error {
	return c.do(ctx, name, ttl, fn, false, opts)
}

// TryDo is Do with one attempt to acquire, as TryAcquire: when another owner
// holds the lock, it returns an error matching ErrHeld and ErrNotAcquired
// (with the holder's remaining TTL in a *HeldError when the backend knows
// it) and fn is not run. Otherwise it does exactly what Do does. It makes
// one attempt whatever WithMaxAttempts says.
func (c *Client) TryDo(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...CallOption) error {
	return c.do(ctx, name, ttl, fn, true, opts)
}

// do is Do, or TryDo when once is set.
func (c *Client) do(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, once bool, opts []CallOption) error {
	cc, keepAlive, err := c.forCall(true, opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return driver.Invalid("nil function")
	}
	attempts := cc.opts.MaxAttempts
	if once {
		attempts = 1
	}
	lease, err := cc.acquire(ctx, name, ttl, attempts, keepAlive)
	if err != nil {
		return err
	}
	fnCtx, cancel := withLease(ctx, lease)
	return runLeased(ctx, lease, ttl, fnCtx, cancel, fn)
}

// heldLease is what Do and DoMulti need of what they hold: a *Lease or a
// *MultiLease.
type heldLease interface {
	Context() context.Context
	Err() error
	Release(ctx context.Context) error
}

// runLeased is Do (or DoMulti) once it holds lease (acquired for ttl): it
// runs fn with fnCtx, which cancel ends, and releases the lease on every
// exit path.
func runLeased[L heldLease](ctx context.Context, lease L, ttl time.Duration, fnCtx context.Context, cancel context.CancelCauseFunc, fn func(ctx context.Context, lease L) error) error {
	returned := false
	defer func() {
		if !returned && !(brokenBuild && broken.doKeepsLockOnPanic) {
			// fn panicked or called runtime.Goexit: clean up, and let it
			// go on (not recovering it is re-panicking it, stack intact).
			cancel(errFnDidNotReturn)
			_ = releaseAfterDo(ctx, lease, ttl)
		}
	}()
	fnErr := fn(fnCtx, lease)
	returned = true
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

// releaseAfterDo releases the lease (or the set) when Do's function is
// done: once, and once more if the outcome was unknown, each try bounded by
// half the ttl.
func releaseAfterDo(ctx context.Context, lease heldLease, ttl time.Duration) error {
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
