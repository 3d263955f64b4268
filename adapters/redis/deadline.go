package redis

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/internal/gocall"
)

// unknownOutcome is the error of a call whose context ended while its
// request was on its way or its reply outstanding: the server may or may not
// have run it. It matches the context's error.
type unknownOutcome struct{ ctxErr error }

func (e *unknownOutcome) Error() string { return fmt.Sprintf("outcome unknown: %v", e.ctxErr) }
func (e *unknownOutcome) Unwrap() error { return e.ctxErr }

// bounded runs send, which sends requests through go-redis and records
// their results in its commands, and waits for it at most until ctx ends.
//
// go-redis honours a context's deadline on the socket only with
// ContextTimeoutEnabled, which is off by default: a call then waits for the
// client's ReadTimeout (and may be resent after it), however short the
// caller's deadline. A lease's renewal and release must not outlive the
// lease, so the adapter bounds every call itself. When ctx ends first,
// bounded returns an *unknownOutcome and send keeps running in the
// background until go-redis gives up; the caller must not look at send's
// commands then. go-redis checks the context before every resend, so an
// abandoned call is not sent again.
//
// send runs on a goroutine of its own when ctx can end. A panic there (a
// go-redis hook of the caller's instrumentation, a typed-nil client) comes
// back to the caller's goroutine as a *lock.PanicError with the value and
// the helper goroutine's stack, so that the caller's recover sees it
// (gocall.Bounded).
func bounded(ctx context.Context, send func()) error {
	if !gocall.Bounded(ctx, send) {
		return &unknownOutcome{ctxErr: ctx.Err()}
	}
	return nil
}
