package lock

import (
	"context"
	"time"
)

// RWLock is a read-write lock: many readers at once, or one writer. Each
// holder holds a permit, a *Lease with its own fencing token (the tokens of
// readers and writers rise together), TTL and keep-alive. Waiters are served
// in the order they arrived, and a writer in line holds back every reader
// that comes after it, so that a stream of readers cannot starve a writer.
//
// Fencing: a writer's token fences its writes as any lease's token does. A
// reader does not write; its lease's PriorWriter is the token of the newest
// writer granted before it, so that a reader can tell from a store's fence
// (fence.Store.Get returns it) whether a newer writer has written since the
// reader began: a fence above PriorWriter means one has, and what the
// reader read may be stale.
//
// It needs a backend with the optional capability PermitBackend; over any
// other, every call returns an error matching ErrUnsupported. A name in use
// as a Semaphore is refused with ErrShapeMismatch.
type RWLock struct {
	client *Client
	name   string
}

// RWLock returns the read-write lock called name. Nothing is sent until a
// permit is asked for.
func (c *Client) RWLock(name string) *RWLock {
	return &RWLock{client: c, name: name}
}

// Name returns the lock's name.
func (l *RWLock) Name() string { return l.name }

// AcquireRead blocks until it holds a read permit, as Client.Acquire.
func (l *RWLock) AcquireRead(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, ReadPermit, ttl, false, opts)
}

// AcquireWrite blocks until it holds the write permit, as Client.Acquire.
func (l *RWLock) AcquireWrite(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, WritePermit, ttl, false, opts)
}

// TryAcquireRead makes one attempt at a read permit: refused (ErrHeld,
// ErrNotAcquired) while a writer holds the lock or waits for it.
func (l *RWLock) TryAcquireRead(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, ReadPermit, ttl, true, opts)
}

// TryAcquireWrite makes one attempt at the write permit: refused (ErrHeld,
// ErrNotAcquired) while anyone holds the lock or waits for it.
func (l *RWLock) TryAcquireWrite(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	return l.acquire(ctx, WritePermit, ttl, true, opts)
}

// DoRead runs fn under a read permit, as Client.Do runs it under a lock.
func (l *RWLock) DoRead(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts ...CallOption) error {
	return l.do(ctx, ReadPermit, ttl, fn, opts)
}

// DoWrite runs fn under the write permit, as Client.Do runs it under a
// lock.
func (l *RWLock) DoWrite(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts ...CallOption) error {
	return l.do(ctx, WritePermit, ttl, fn, opts)
}

// Inspect reports the lock's live permits, waiters and last writer.
func (l *RWLock) Inspect(ctx context.Context) (Permits, error) {
	return l.client.inspectPermits(ctx, l.name)
}

func (l *RWLock) acquire(ctx context.Context, kind PermitKind, ttl time.Duration, once bool, opts []CallOption) (*Lease, error) {
	cc, err := l.client.permitClient(kind, 0)
	if err != nil {
		return nil, err
	}
	if once {
		return cc.TryAcquire(ctx, l.name, ttl, opts...)
	}
	return cc.Acquire(ctx, l.name, ttl, opts...)
}

func (l *RWLock) do(ctx context.Context, kind PermitKind, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts []CallOption) error {
	cc, err := l.client.permitClient(kind, 0)
	if err != nil {
		return err
	}
	return cc.Do(ctx, l.name, ttl, fn, opts...)
}
