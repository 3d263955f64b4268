package sqldb

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// acquireUnqueued is acquireInLine on a schema that Migrate has not
// upgraded yet: the lease table exists but its queue table does not (an
// application upgraded before its schema). Rather than fail, the waiter
// polls, as on a Backend without queued waiting: acquireLock, which may
// take a free lock ahead of others (unfair, as before), whose refusal is
// the *driver.HeldError wrapped with a note that says to run Migrate (so a
// Client's Observer.Retrying sees it with each retry); awaitTurn then backs
// off, doubling from 10 ms to 1 s with jitter, instead of re-checking the
// queue. Each attempt tries the queue first, so waiting in line resumes as
// soon as Migrate has run. A missing lease table is still ErrNotMigrated.
func (b *Backend) acquireUnqueued(ctx context.Context, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	key := waitKey(name, owner)
	b.forget(name, owner)
	return b.unqueued.Acquire(key, b.queue, "sqldb.Migrate", func() (fence.Token, error) {
		return b.acquireLock(ctx, name, owner, ttl, md)
	})
}
