package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.Backend = (*Backend)(nil)

// Backend is an in-process lock.Backend. The zero value is not usable; call
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
	metadata string // the holder metadata from Acquire's context
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

// Acquire takes name for owner for ttl, minting a new token, or extends it
// with the same token when owner already holds it. Either way the lease
// keeps the holder metadata that ctx carries (lock.ContextWithMetadata),
// replacing what a same-owner Acquire stored before.
func (b *Backend) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	md, err := lock.ValidateAcquire(ctx, name, owner, ttl)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if l, ok := b.live(name, now); ok {
		if l.owner != owner {
			return 0, &lock.HeldError{Name: name, TTL: l.expires.Sub(now)}
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

// Extend renews owner's lease on name for ttl from now.
func (b *Backend) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l, ok := b.live(name, now)
	if !ok || l.owner != owner {
		return notHeld(name)
	}
	l.expires = now.Add(ttl)
	b.leases[name] = l
	return nil
}

// Release frees name if owner holds it.
func (b *Backend) Release(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.live(name, b.now())
	if !ok || l.owner != owner {
		return notHeld(name)
	}
	delete(b.leases, name)
	b.wakeFirst(name, b.now())
	return nil
}

// Inspect reports the holder of name, its token, remaining TTL and metadata.
func (b *Backend) Inspect(ctx context.Context, name string) (lock.Info, error) {
	if err := fence.ValidateKey(name); err != nil {
		return lock.Info{}, fmt.Errorf("lock name: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return lock.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l, ok := b.live(name, now)
	if !ok {
		return lock.Info{Name: name}, nil
	}
	return lock.Info{Name: name, Held: true, Owner: l.owner, Token: l.token, TTL: l.expires.Sub(now), Metadata: l.metadata}, nil
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

func notHeld(name string) error {
	return fmt.Errorf("%w: %q", lock.ErrNotHeld, name)
}
