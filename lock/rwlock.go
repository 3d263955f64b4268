package lock

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// RWLock is a read-write lock: many readers at once, or one writer. Each
// holder holds a permit, a *Lease with its own fencing token (the tokens of
// readers and writers rise together), TTL and keep-alive. Waiters are served
// in the order they arrived, and a writer in line holds back every reader
// that comes after it, so that a stream of readers cannot starve a writer.
//
// Fencing: a writer's token fences its writes as any lease's token does. A
// reader does not write, but a writer that paused past its TTL may wake
// while a reader holds a live permit, and its late write carries the fence
// the reader last saw (the reader's PriorWriter, the token of the newest
// writer granted before it). So a reader first raises the key's fence to
// its ReadFence, PriorWriter + 1, with Fenced(store).Advance: every writer
// granted before the reader is refused from then on, every writer granted
// after it is not. Before it acts on what it read, it gets the key's fence
// again (fence.Store.Get returns it): a fence above ReadFence means a newer
// writer has written since, and what it read may be stale.
//
// Every backend shipped with fencekit has read-write locks. A name in use
// as a Semaphore is refused with ErrShapeMismatch.
type RWLock struct {
	client *Client
	name   string
}

// RWLock returns the read-write lock called name. It sends nothing and
// refuses nothing: a bad name is refused by each call on the lock, Inspect
// included, with an error matching ErrInvalid, before anything is sent.
func (c *Client) RWLock(name string) *RWLock {
	return &RWLock{client: c, name: name}
}

// Name returns the lock's name.
func (l *RWLock) Name() string { return l.name }

// AcquireRead blocks until it holds a read permit, as Client.Acquire.
func (l *RWLock) AcquireRead(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, driver.Read, ttl, false, opts)
}

// AcquireWrite blocks until it holds the write permit, as Client.Acquire.
func (l *RWLock) AcquireWrite(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, driver.Write, ttl, false, opts)
}

// TryAcquireRead makes one attempt at a read permit: refused (ErrHeld,
// ErrNotAcquired) while a writer holds the lock or waits for it.
func (l *RWLock) TryAcquireRead(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, driver.Read, ttl, true, opts)
}

// TryAcquireWrite makes one attempt at the write permit: refused (ErrHeld,
// ErrNotAcquired) while anyone holds the lock or waits for it.
func (l *RWLock) TryAcquireWrite(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, driver.Write, ttl, true, opts)
}

// DoRead runs fn under a read permit, as Client.Do runs it under a lock.
func (l *RWLock) DoRead(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts ...CallOption) error {
	return l.do(ctx, driver.Read, ttl, fn, opts)
}

// DoWrite runs fn under the write permit, as Client.Do runs it under a
// lock.
func (l *RWLock) DoWrite(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts ...CallOption) error {
	return l.do(ctx, driver.Write, ttl, fn, opts)
}

// Inspect reports the lock's live permits, waiters and last writer.
func (l *RWLock) Inspect(ctx context.Context) (Info, error) {
	return l.client.inspectPermits(ctx, l.name)
}

func (l *RWLock) acquire(ctx context.Context, kind driver.Kind, ttl time.Duration, once bool, opts []CallOption) (*Lease, error) {
	cc, err := l.client.shapeClient(l.name, kind, 0)
	if err != nil {
		return nil, err
	}
	if once {
		return cc.TryAcquire(ctx, l.name, ttl, opts...)
	}
	return cc.Acquire(ctx, l.name, ttl, opts...)
}

func (l *RWLock) do(ctx context.Context, kind driver.Kind, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts []CallOption) error {
	cc, err := l.client.shapeClient(l.name, kind, 0)
	if err != nil {
		return err
	}
	return cc.Do(ctx, l.name, ttl, fn, opts...)
}
