package lock

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/internal/gocall"
)

// PanicError is what a call of this package re-panics with when a backend
// call it ran on a goroutine of its own (a renewal or release under a
// context that can end, see bounded) panicked there: the original value
// (Value; Unwrap returns it when it is an error) and the stack of the
// goroutine that panicked. The panic thus reaches the caller's recover
// instead of ending the program. adapters/redis does the same for the
// go-redis calls it bounds.
type PanicError = gocall.PanicError

// bounded runs call and returns its error, or returns as soon as ctx ends,
// whichever comes first. Some backend clients (go-redis with its default
// ContextTimeoutEnabled=false, for one) keep waiting for a reply long after
// the context's deadline; bounded makes renewals and releases return on time
// regardless. When ctx ends first the outcome is unknown: the call may still
// land on the server, and its late reply is discarded, so it can neither
// revive a lease nor be reported. The error then matches ctx.Err(), which
// counts as transient (driver.Retryable).
//
// A panic in call comes back to the caller's goroutine as a *PanicError
// (see gocall.Bounded); so does a runtime.Goexit.
func bounded(ctx context.Context, call func(context.Context) error) error {
	var err error
	if !gocall.Bounded(ctx, func() { err = call(ctx) }) {
		return fmt.Errorf("lock: outcome unknown, the backend did not answer before the context ended: %w", context.Cause(ctx))
	}
	return err
}
