package lock

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Do acquires the lock name (blocking, as Acquire), keeps the lease alive,
// and runs fn with a context that is cancelled when ctx ends or the lease is
// lost. It releases the lease when fn returns, even if ctx has ended by then.
//
// Do returns fn's error. If the lease was lost while fn ran, the error also
// matches ErrLost: fn's work may have overlapped another holder's, and only
// fenced writes are safe from that.
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
	fnErr := fn(fnCtx, lease)
	stop()
	cancel(nil)

	lost := lease.Err() // before Release, which ends the lease in any case
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	relErr := lease.Release(rctx)
	rcancel()

	var errs []error
	if fnErr != nil {
		errs = append(errs, fnErr)
	}
	if lost != nil {
		errs = append(errs, lost)
	} else if relErr != nil {
		errs = append(errs, relErr)
	}
	return errors.Join(errs...)
}
