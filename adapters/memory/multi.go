package memory

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.MultiBackend = (*Backend)(nil)

// AcquireMulti takes every name for owner for ttl under one lock of the
// backend, or none: when another owner holds any of them it changes nothing
// and returns a *lock.HeldError for the first such name (in the order
// given). Names owner already holds are extended with their tokens; each
// free one gets a new token, as Acquire mints it. Every lease keeps the
// holder metadata that ctx carries.
func (b *Backend) AcquireMulti(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	if err := lock.ValidateMulti(names, owner, ttl); err != nil {
		return nil, err
	}
	md := lock.MetadataFromContext(ctx)
	if err := lock.ValidateMetadata(md); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for _, name := range names {
		if l, ok := b.live(name, now); ok && l.owner != owner {
			return nil, &lock.HeldError{Name: name, TTL: l.expires.Sub(now)}
		}
	}
	tokens := make([]fence.Token, len(names))
	for i, name := range names {
		if l, ok := b.live(name, now); ok {
			l.expires, l.metadata = now.Add(ttl), md
			b.leases[name] = l
			tokens[i] = l.token
			continue
		}
		tokens[i] = b.take(name, owner, ttl, md, now)
	}
	return tokens, nil
}
