package lock

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// DoMulti acquires every lock in names (blocking, as AcquireMulti), keeps
// the set alive (unless WithKeepAlive(false) is among opts), and runs fn
// with a context that is cancelled when ctx ends or the set ends (one lease
// lost, or the set released by fn). When fn is done, DoMulti cancels fn's
// context, stops the keep-alive and releases the set, even if ctx has ended
// by then, and also when fn panics or calls runtime.Goexit (the panic goes
// on). The release is bounded by ttl, and retried once when its outcome is
// unknown, as Do's.
//
// It returns nil when fn returned nil and the set was released; otherwise
// fn's error joined with the error that lost the set (then fn's work may
// have overlapped another holder's on the lost name, and only writes fenced
// with that name's token are safe) or with the release's error; or the
// acquire error, matching ErrNotAcquired, without running fn.
func (c *Client) DoMulti(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, set *MultiLease) error, opts ...CallOption) error {
	return c.doMulti(ctx, names, ttl, fn, false, opts)
}

// TryDoMulti is DoMulti with one attempt to acquire, as TryAcquireMulti:
// when another owner holds one of the names, it returns an error matching
// ErrHeld and ErrNotAcquired and fn is not run.
func (c *Client) TryDoMulti(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, set *MultiLease) error, opts ...CallOption) error {
	return c.doMulti(ctx, names, ttl, fn, true, opts)
}

func (c *Client) doMulti(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, set *MultiLease) error, once bool, opts []CallOption) error {
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
	set, err := cc.acquireMulti(ctx, names, ttl, attempts, keepAlive)
	if err != nil {
		return err
	}
	fnCtx, cancel := followLease(ctx, set.Context())
	return runLeased(ctx, set, ttl, fnCtx, cancel, fn)
}
