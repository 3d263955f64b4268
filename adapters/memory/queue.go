package memory

import (
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// place is one waiter's place in a lock's queue: a FIFO per name, whose
// entries expire unless their waiter renews them.
type place struct {
	owner   string
	expires time.Time
	// wake gets a value when the waiter should ask again. Buffered (1), so
	// a wake-up sent before the waiter calls Await is kept for it.
	wake chan struct{}
}

// acquireInLine takes name for owner when the lock is free and nobody is
// ahead of owner in its queue (minting a token as acquireLock does), extends
// owner's own lease, or else keeps owner's place in the queue for placeTTL
// from now, adding it at the tail when owner has none, and returns a
// *driver.HeldError: with the holder's remaining TTL when owner is first in
// line, 0 otherwise. Places whose time ran out are dropped first. The caller
// holds b.mu.
func (b *Backend) acquireInLine(name, owner string, ttl, placeTTL time.Duration, md string, now time.Time) (fence.Token, error) {
	b.dropExpired(name, now)
	q := b.queues[name]
	at := slices.IndexFunc(q, func(p *place) bool { return p.owner == owner })
	l, held := b.live(name, now)
	switch {
	case held && l.owner == owner:
		b.removePlace(name, at)
		l.expires = now.Add(ttl)
		l.metadata = md
		b.leases[name] = l
		return l.token, nil
	case !held && (len(q) == 0 || at == 0):
		b.removePlace(name, at)
		return b.take(name, owner, ttl, md, now), nil
	}
	if at < 0 {
		at = len(q)
		b.queues[name] = append(q, newPlace(owner))
	}
	b.queues[name][at].expires = now.Add(placeTTL)
	// A waiter ahead may have been dropped above while the lock is free:
	// the new first in line must hear of it.
	b.wakeFirst(name, now)
	var remaining time.Duration
	if held && at == 0 {
		remaining = l.expires.Sub(now)
	}
	return 0, &driver.HeldError{Name: name, TTL: remaining}
}

func newPlace(owner string) *place {
	return &place{owner: owner, wake: wake.NewBox()}
}

// lockWakeBox returns the wake-up box of owner's place in name's queue, nil
// when it has none. The caller holds b.mu.
func (b *Backend) lockWakeBox(name, owner string) chan struct{} {
	for _, p := range b.queues[name] {
		if p.owner == owner {
			return p.wake
		}
	}
	return nil
}

// leaveLockLine removes owner's place from name's queue, waking the next
// waiter when owner was first in line and the lock is free. The caller holds
// b.mu.
func (b *Backend) leaveLockLine(name, owner string, now time.Time) {
	b.removePlace(name, slices.IndexFunc(b.queues[name], func(p *place) bool { return p.owner == owner }))
	b.wakeFirst(name, now)
}

// Waiting returns the owners waiting for name, first in line first, places
// that ran out left out. Tests and operators use it.
func (b *Backend) Waiting(name string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var owners []string
	now := b.now()
	for _, p := range b.queues[name] {
		if now.Before(p.expires) {
			owners = append(owners, p.owner)
		}
	}
	return owners
}

// dropExpired removes the places on name whose time ran out. The caller
// holds b.mu.
func (b *Backend) dropExpired(name string, now time.Time) {
	q := slices.DeleteFunc(b.queues[name], func(p *place) bool { return !now.Before(p.expires) })
	b.setQueue(name, q)
}

// removePlace removes the place at index at (none when at < 0). The caller
// holds b.mu.
func (b *Backend) removePlace(name string, at int) {
	if at >= 0 {
		b.setQueue(name, slices.Delete(b.queues[name], at, at+1))
	}
}

func (b *Backend) setQueue(name string, q []*place) {
	if len(q) == 0 {
		delete(b.queues, name) // nothing is kept for a lock nobody waits for
		return
	}
	b.queues[name] = q
}

// wakeFirst wakes the first waiter in line for name if the lock is free.
// The caller holds b.mu.
func (b *Backend) wakeFirst(name string, now time.Time) {
	q := b.queues[name]
	if len(q) == 0 {
		return
	}
	if _, held := b.live(name, now); held {
		return
	}
	wake.Post(q[0].wake)
}
