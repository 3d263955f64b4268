package nats

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// resume renews owner's lease on name to ttl (rounded up to whole seconds)
// from now and returns its token, keeping its metadata. As extendLock, it reads
// the entry (or takes this Backend's cached copy, on the first attempt) and
// re-publishes it with the read revision expected, carrying the token and a
// fresh TTL: the write succeeds only if the entry is still the one read,
// owner's lease with that token, so the owner check, the renewal and the
// token are one atomic step at the stream. A conflict (the entry changed in
// between) reads again. When owner does not hold name (no entry: released or
// expired; or another owner's) it returns an error matching driver.ErrNotHeld
// and writes nothing: a lost lease is never re-created and no token minted.
func (b *Backend) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	k := b.Key(name)
	for attempt := 0; ; attempt++ {
		_, l, err := b.lookup(ctx, k, owner, attempt)
		if err != nil {
			return 0, opError(ctx, "resume", name, err)
		}
		if l == nil || l.owner != owner {
			return 0, driver.NotHeld(name)
		}
		seq, err := b.b.write(ctx, k, l.seq, renewal(l.token), leaseData(owner, l.metadata), keyTTL(ttl))
		if err == nil {
			b.cache.put(k, lease{seq: seq, owner: owner, metadata: l.metadata, token: l.token})
			return l.token, nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			b.cache.drop(k)
			return 0, opError(ctx, "resume", name, err)
		}
	}
}
