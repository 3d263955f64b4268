package lock

import (
	"context"

	"github.com/fencekit/fencekit/lock/driver"
)

// WithLease returns a copy of parent that is also cancelled when lease ends:
// released or lost. context.Cause tells which came first: parent's cause, or
// the lease's (ErrReleased, or an error matching ErrLost). Calling cancel
// cancels the copy with context.Canceled and leaves the lease as it is; call
// it as soon as the work under the context is done, as with
// context.WithCancel.
//
// Lease.Context alone ends only with the lease; Do and TryDo give their
// function a context made this way. A nil parent or lease yields a context
// that is already cancelled, with a cause matching ErrInvalid.
func WithLease(parent context.Context, lease *Lease) (ctx context.Context, cancel context.CancelFunc) {
	ctx, cancelCause := withLease(parent, lease)
	return ctx, func() { cancelCause(nil) }
}

// errNilLeaseContext is the cause of WithLease's context over nil arguments.
var errNilLeaseContext = driver.Invalid("WithLease needs a parent context and a lease")

// withLease is WithLease with a cancel that takes a cause, as Do needs.
func withLease(parent context.Context, lease *Lease) (context.Context, context.CancelCauseFunc) {
	if parent == nil || lease == nil {
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithCancelCause(parent)
		cancel(errNilLeaseContext)
		return ctx, cancel
	}
	return followLease(ContextWithLease(parent, lease), lease.Context())
}

// followLease returns a copy of parent that is also cancelled, with the
// lease's cause, when leaseCtx (a Lease's or a MultiLease's Context) ends.
func followLease(parent, leaseCtx context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(leaseCtx, func() { cancel(context.Cause(leaseCtx)) })
	return ctx, func(cause error) {
		stop()
		cancel(cause)
	}
}
