package pgqueue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Backoff of a waiter that polls because the queue table does not exist
// yet: the bounds of lock.Options' default backoff (MinBackoff 10 ms,
// doubling up to MaxBackoff 1 s), so that such a waiter polls as Acquire
// did before queued waiting.
const (
	UnqueuedMinBackoff = 10 * time.Millisecond
	UnqueuedMaxBackoff = time.Second
)

// Unqueued tracks the waiters of one Backend whose acquire with a place in
// line fell back to a plain acquire because the queue table is missing (a
// schema that Migrate has not upgraded yet): for each, how many attempts
// were refused, from which the Backend's Await takes a jittered, doubling
// backoff instead of waiting for a wake-up that cannot come. Both SQL adapters use it, on
// MySQL as on PostgreSQL. The zero value is ready; it is safe for
// concurrent use.
type Unqueued struct {
	mu      sync.Mutex
	refused map[string]int // key -> refused attempts
}

// Refused records one more refused attempt of key's waiter.
func (u *Unqueued) Refused(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.refused == nil {
		u.refused = map[string]int{}
	}
	u.refused[key]++
}

// Forget drops key's waiter: it took the lock, gave up, or queues again.
func (u *Unqueued) Forget(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.refused, key)
}

// Backoff returns how long key's waiter should wait before it asks again,
// and false when it does not poll (it waits in the queue table).
func (u *Unqueued) Backoff(key string) (time.Duration, bool) {
	u.mu.Lock()
	n, ok := u.refused[key]
	u.mu.Unlock()
	if !ok {
		return 0, false
	}
	ceiling := UnqueuedMaxBackoff
	if n < 16 {
		if d := UnqueuedMinBackoff << max(n-1, 0); d < ceiling {
			ceiling = d
		}
	}
	return time.Duration(rand.Int64N(int64(ceiling))) + 1, true
}

// Acquire is one polling attempt of key's waiter: acquire (the adapter's
// plain acquire) takes the lock, and then key is forgotten, or is refused
// with driver.ErrHeld, which counts toward key's backoff and comes back wrapped
// with a note that the queue table does not exist yet and that migrate
// (the adapter's Migrate, by name) makes waiters queue again. Any other
// error is returned as it is.
func (u *Unqueued) Acquire(key, queueTable, migrate string, acquire func() (fence.Token, error)) (fence.Token, error) {
	token, err := acquire()
	switch {
	case err == nil:
		u.Forget(key)
		return token, nil
	case errors.Is(err, driver.ErrHeld):
		u.Refused(key)
		return 0, fmt.Errorf("%w (polling: the queue table %s does not exist yet; run %s to wait in line)", err, queueTable, migrate)
	}
	return 0, err
}
