package lock

import (
	"context"
	"errors"
	"time"
)

// reach keeps Options.MaxUnreachable over one Acquire's run of attempts
// (polled or queued): it bounds how long attempts in a row may go without
// an answer about the lock. The pause after an answer is Acquire's own
// choice and does not count against the backend.
type reach struct {
	bound      time.Duration // 0: no bound
	unanswered time.Time     // when the first of the unanswered attempts in a row began
	answered   bool          // the last attempt got an answer
}

func newReach(bound time.Duration) *reach { return &reach{bound: bound, answered: true} }

// attempt returns the context for the next attempt: ctx, cut at the bound
// when there is one, so that an attempt that hangs (a dropped SYN, a server
// that never answers) cannot outlast it either.
func (r *reach) attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.answered {
		r.unanswered, r.answered = time.Now(), false
	}
	if r.bound <= 0 {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, r.unanswered.Add(r.bound))
}

// result records an attempt's error: ErrHeld is an answer about the lock.
func (r *reach) result(err error) {
	if errors.Is(err, ErrHeld) {
		r.answered = true
	}
}

// exceeded reports whether an attempt after a pause of wait would start
// past the bound, the last attempt having got no answer.
func (r *reach) exceeded(wait time.Duration) bool {
	return r.bound > 0 && !r.answered && time.Since(r.unanswered)+wait >= r.bound
}

// keepLast says whether an attempt's error err should replace last, the
// error Acquire reports when it gives up. An attempt cut short by the
// context ending says nothing about the lock; keep the previous attempt's
// answer (ctx.Err() is joined in). One cut by the bound (actx ended, ctx
// did not) keeps the previous failure to reach the backend (a refused
// connection says more than a timeout), but not an ErrHeld, which would
// misname why Acquire gave up.
func keepLast(ctx, actx context.Context, last error) bool {
	cutByBound := actx.Err() != nil && ctx.Err() == nil
	return last == nil || (ctx.Err() == nil && (!cutByBound || errors.Is(last, ErrHeld)))
}
