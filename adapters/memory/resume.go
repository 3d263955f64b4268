package memory

import (
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// resume renews owner's live lease on name to ttl from now and returns its
// token, keeping its metadata. When owner does not hold name it returns an
// error matching driver.ErrNotHeld and changes nothing. The caller holds
// b.mu.
func (b *Backend) resume(name, owner string, ttl time.Duration, now time.Time) (fence.Token, error) {
	l, ok := b.live(name, now)
	if !ok || l.owner != owner {
		return 0, driver.NotHeld(name)
	}
	l.expires = now.Add(ttl)
	b.leases[name] = l
	return l.token, nil
}
