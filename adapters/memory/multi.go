package memory

import (
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// acquireSet takes every name for owner for ttl in one critical section,
// or none: when another owner holds any of them it changes nothing and
// returns a *driver.HeldError for the first such name (in the order given).
// Names owner already holds are extended with their tokens; each free one
// gets a new token, as acquireLock mints it. Every lease keeps md. The
// caller holds b.mu.
func (b *Backend) acquireSet(names []string, owner string, ttl time.Duration, md string, now time.Time) ([]fence.Token, error) {
	for _, name := range names {
		if l, ok := b.live(name, now); ok && l.owner != owner {
			return nil, &driver.HeldError{Name: name, TTL: l.expires.Sub(now)}
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
