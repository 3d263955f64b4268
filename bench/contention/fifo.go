package contention

import (
	"context"
	"sync"
)

// fifoMutex is an in-process lock that serves waiters strictly in arrival
// order and hands the lock straight to the next waiter on unlock: the floor
// that no distributed lock can beat.
type fifoMutex struct {
	mu      sync.Mutex
	held    bool
	waiters []chan struct{}
}

func (m *fifoMutex) lock(ctx context.Context) error {
	m.mu.Lock()
	if !m.held {
		m.held = true
		m.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	m.waiters = append(m.waiters, ch)
	m.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, w := range m.waiters {
			if w == ch {
				m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// Handed the lock as the context ended: pass it on.
		m.unlockLocked()
		return ctx.Err()
	}
}

func (m *fifoMutex) unlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unlockLocked()
}

func (m *fifoMutex) unlockLocked() {
	if len(m.waiters) == 0 {
		m.held = false
		return
	}
	next := m.waiters[0]
	m.waiters = m.waiters[1:]
	close(next) // held stays true: ownership passes directly
}
