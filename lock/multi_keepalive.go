package lock

import (
	"context"
	"time"
)

// startKeepAlive starts the one goroutine that renews every lease of the set
// every KeepAliveInterval of its TTL (all at once, see MultiLease.Extend). A
// renewal that fails transiently is retried sooner; a lease that is lost
// loses the set, which stops the keep-alive.
func (m *MultiLease) startKeepAlive() {
	// Not derived from the set's context: a renewal cut short when the set
	// ends must fail with context.Canceled, not with the set's cause (which
	// may match ErrNotHeld and would lose the other leases, unreleased).
	// Every path that ends the set stops the keep-alive.
	ctx, cancel := context.WithCancel(m.values)
	m.mu.Lock()
	if m.ka != nil || m.ended {
		m.mu.Unlock()
		cancel()
		return
	}
	m.ka = cancel
	m.mu.Unlock()
	go m.renewLoop(ctx)
}

// stopKeepAlive stops the keep-alive, if any, without waiting for a renewal
// in flight.
func (m *MultiLease) stopKeepAlive() {
	m.mu.Lock()
	ka := m.ka
	m.mu.Unlock()
	if ka != nil {
		ka()
	}
}

func (m *MultiLease) renewLoop(ctx context.Context) {
	failed := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		m.mu.Lock()
		ttl := m.ttl
		m.mu.Unlock()
		life := ttl
		for _, l := range m.leases {
			l.mu.Lock()
			if l.unknownTTL > 0 && l.unknownTTL < life {
				life = l.unknownTTL // the deadlines count on no more than this
			}
			l.mu.Unlock()
		}
		wait := m.client.opts.renewEvery(life)
		if failed {
			wait /= 4
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		// A renewal that cannot finish before the earliest local deadline
		// is useless: the set is lost by then.
		rctx, cancel := context.WithDeadline(ctx, m.Deadline())
		err := m.Extend(rctx, ttl)
		cancel()
		if ctx.Err() != nil || m.Err() != nil {
			return
		}
		failed = err != nil
	}
}
