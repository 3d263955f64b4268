package lock

import (
	"context"
	"time"
)

// keepAlive renews a lease in the background until it is stopped or the lease
// ends.
type keepAlive struct {
	cancel context.CancelFunc
}

// startKeepAlive starts renewing l every KeepAliveInterval of its TTL. A
// renewal that fails transiently is retried sooner; if none succeeds before
// the local deadline, the deadline timer marks the lease lost. A renewal that
// fails for good (ErrNotHeld, or an error that a retry cannot cure) loses
// the lease at once (see Lease.Extend).
func (l *Lease) startKeepAlive() {
	ctx, cancel := context.WithCancel(l.ctx)
	ka := &keepAlive{cancel: cancel}
	l.mu.Lock()
	if l.ka != nil || l.ended {
		l.mu.Unlock()
		cancel()
		return
	}
	l.ka = ka
	l.mu.Unlock()
	go l.renewLoop(ctx)
}

// stopKeepAlive stops the keep-alive, if any. It does not wait: a renewal in
// flight is abandoned (its late reply is discarded by Extend, which returns
// as soon as its context is cancelled), so that neither a backend that
// ignores its context nor an Observer that calls Release from inside the
// keep-alive can make the caller wait.
func (l *Lease) stopKeepAlive() {
	l.mu.Lock()
	ka := l.ka
	l.mu.Unlock()
	if ka != nil {
		ka.cancel()
	}
}

func (l *Lease) renewLoop(ctx context.Context) {
	failed := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		l.mu.Lock()
		ttl, deadline, life := l.ttl, l.deadline, l.ttl
		if l.unknownTTL > 0 && l.unknownTTL < life {
			life = l.unknownTTL // the deadlines count on no more than this
		}
		l.mu.Unlock()
		wait := l.client.opts.renewEvery(life)
		if failed {
			wait /= 4
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		// A renewal that cannot finish before the local deadline is
		// useless; Extend returns by then even if the backend does not.
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := l.Extend(rctx, ttl)
		cancel()
		if ctx.Err() != nil || l.Err() != nil {
			return
		}
		failed = err != nil
	}
}
