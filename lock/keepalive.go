package lock

import (
	"context"
	"errors"
	"time"
)

// keepAlive renews a lease in the background until it is stopped or the lease
// ends.
type keepAlive struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startKeepAlive starts renewing l every KeepAliveInterval of its TTL. A
// renewal that fails for any reason but ErrNotHeld is retried sooner; if none
// succeeds before the local deadline, the deadline timer marks the lease lost.
func (l *Lease) startKeepAlive() {
	ctx, cancel := context.WithCancel(l.ctx)
	ka := &keepAlive{cancel: cancel, done: make(chan struct{})}
	l.mu.Lock()
	if l.ka != nil || l.ended {
		l.mu.Unlock()
		cancel()
		return
	}
	l.ka = ka
	l.mu.Unlock()
	go l.renewLoop(ctx, ka.done)
}

// stopKeepAlive stops the keep-alive, if any, and waits for it to finish, so
// that no renewal races a release.
func (l *Lease) stopKeepAlive() {
	l.mu.Lock()
	ka := l.ka
	l.mu.Unlock()
	if ka != nil {
		ka.cancel()
		<-ka.done
	}
}

func (l *Lease) renewLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	failed := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		l.mu.Lock()
		ttl, deadline := l.ttl, l.deadline
		l.mu.Unlock()
		wait := time.Duration(float64(ttl) * l.client.opts.KeepAliveInterval)
		if failed {
			wait /= 4
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		// A renewal that cannot finish before the local deadline is useless.
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := l.Extend(rctx, ttl)
		cancel()
		if errors.Is(err, ErrNotHeld) {
			return
		}
		failed = err != nil
	}
}
