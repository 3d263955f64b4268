package lock

import (
	"context"
	"fmt"
)

// bounded runs call and returns its error, or returns as soon as ctx ends,
// whichever comes first. Some backend clients (go-redis with its default
// ContextTimeoutEnabled=false, for one) keep waiting for a reply long after
// the context's deadline; bounded makes renewals and releases return on time
// regardless. When ctx ends first the outcome is unknown: the call may still
// land on the server, and its late reply is discarded, so it can neither
// revive a lease nor be reported. The error then matches ctx.Err(), which
// Retryable counts as transient.
func bounded(ctx context.Context, call func(context.Context) error) error {
	if ctx.Done() == nil {
		return call(ctx) // nothing can end ctx: there is no bound to keep
	}
	reply := make(chan error, 1) // buffered: a late reply must not block its goroutine
	go func() { reply <- call(ctx) }()
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		select {
		case err := <-reply: // it answered just in time
			return err
		default:
		}
		return fmt.Errorf("lock: outcome unknown, the backend did not answer before the context ended: %w", context.Cause(ctx))
	}
}
