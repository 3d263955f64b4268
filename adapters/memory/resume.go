package memory

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.Resumer = (*Backend)(nil)

// Resume renews owner's live lease on name to ttl from now and returns its
// token, keeping its metadata, in one section under the backend's mutex. When
// owner does not hold name it returns an error matching lock.ErrNotHeld and
// changes nothing.
func (b *Backend) Resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	l, ok := b.live(name, now)
	if !ok || l.owner != owner {
		return 0, notHeld(name)
	}
	l.expires = now.Add(ttl)
	b.leases[name] = l
	return l.token, nil
}
