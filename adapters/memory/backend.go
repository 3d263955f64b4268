package memory

import (
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

var _ driver.Backend = (*Backend)(nil)

// Backend is an in-process lock backend (a driver.Backend), the reference
// implementation of the driver contract. The zero value is not usable; call
// NewBackend.
type Backend struct {
	now func() time.Time

	mu     sync.Mutex
	leases map[string]lease
	last   map[string]fence.Token // the highest token ever minted per name
	queues map[string][]*place    // the waiters per name, first in line first (queue.go)
	// permits are the semaphores and read-write locks, apart from leases
	// (permits.go).
	permits map[string]*permitName
}

type lease struct {
	owner    string
	token    fence.Token
	expires  time.Time
	metadata string // the holder metadata of the Acquire (Request.Metadata)
}

// NewBackend returns an empty Backend on the real clock.
func NewBackend() *Backend {
	return &Backend{now: time.Now, leases: map[string]lease{}, last: map[string]fence.Token{}, queues: map[string][]*place{}, permits: map[string]*permitName{}}
}

// live returns the live lease on name, if any. The caller holds b.mu.
func (b *Backend) live(name string, now time.Time) (lease, bool) {
	l, ok := b.leases[name]
	if ok && !now.Before(l.expires) {
		delete(b.leases, name)
		return lease{}, false
	}
	return l, ok
}

// acquireLock takes the lock name for owner for ttl, minting a new token,
// or extends it with the same token when owner already holds it, ignoring
// the line (a request without a place may barge). Either way the lease keeps
// md, replacing what a same-owner acquire stored before. The caller holds
// b.mu.
func (b *Backend) acquireLock(name, owner string, ttl time.Duration, md string, now time.Time) (fence.Token, error) {
	if l, ok := b.live(name, now); ok {
		if l.owner != owner {
			return 0, &driver.HeldError{Name: name, TTL: l.expires.Sub(now)}
		}
		l.expires = now.Add(ttl)
		l.metadata = md
		b.leases[name] = l
		return l.token, nil
	}
	return b.take(name, owner, ttl, md, now), nil
}

// take gives the free lock name to owner with a new token. The caller holds
// b.mu.
func (b *Backend) take(name, owner string, ttl time.Duration, md string, now time.Time) fence.Token {
	token := b.last[name] + 1
	b.last[name] = token
	b.leases[name] = lease{owner: owner, token: token, expires: now.Add(ttl), metadata: md}
	return token
}

// extendLock renews owner's lease on name for ttl from now. The caller
// holds b.mu.
func (b *Backend) extendLock(name, owner string, ttl time.Duration, now time.Time) error {
	l, ok := b.live(name, now)
	if !ok || l.owner != owner {
		return driver.NotHeld(name)
	}
	l.expires = now.Add(ttl)
	b.leases[name] = l
	return nil
}

// releaseLock frees name if owner holds it and wakes the first waiter.
// The caller holds b.mu.
func (b *Backend) releaseLock(name, owner string, now time.Time) error {
	l, ok := b.live(name, now)
	if !ok || l.owner != owner {
		return driver.NotHeld(name)
	}
	delete(b.leases, name)
	b.wakeFirst(name, now)
	return nil
}

// inspectLock reports the holder of name, its token, remaining TTL and
// metadata, and the live places in its line. The caller holds b.mu.
func (b *Backend) inspectLock(name string, now time.Time) driver.Info {
	b.dropExpired(name, now)
	info := driver.Info{Name: name, Kind: driver.Exclusive, Waiting: len(b.queues[name])}
	if l, ok := b.live(name, now); ok {
		info.Holders = []driver.Holder{{Owner: l.owner, Kind: driver.Exclusive, Token: l.token, TTL: l.expires.Sub(now), Metadata: l.metadata}}
	}
	return info
}

// Expire ends the lease on name at once, as if its TTL had run out. The next
// token stays above every earlier one, and the first waiter in line is woken
// (as it would have woken itself at the end of the TTL). Tests use it to
// simulate expiry without waiting.
func (b *Backend) Expire(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.leases, name)
	b.wakeFirst(name, b.now())
}
