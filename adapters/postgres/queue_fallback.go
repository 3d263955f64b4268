package postgres

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// acquireUnqueued is AcquireOrEnqueue on a schema that Migrate has not
// upgraded yet: the lease table exists but its queue table does not (an
// application upgraded before its schema). Rather than fail, the waiter
// polls, as on a Backend without queued waiting: a plain Acquire, which may
// take a free lock ahead of others (unfair, as before), whose refusal is
// the *lock.HeldError wrapped with a note that says to run Migrate (so a
// Client's Observer sees it with each EventRetrying); AwaitTurn then backs
// off, doubling from 10 ms to 1 s with jitter, instead of waiting for a
// wake-up. Each attempt tries the queue first, so waiting in line resumes
// as soon as Migrate has run. A missing lease table (or an older one that
// Acquire's statement does not fit) is still ErrNotMigrated.
func (b *Backend) acquireUnqueued(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	box := mailbox(name, owner)
	b.waker.close(box)
	return b.unqueued.Acquire(box, b.queue, "postgres.Migrate", func() (fence.Token, error) {
		return b.Acquire(ctx, name, owner, ttl)
	})
}
