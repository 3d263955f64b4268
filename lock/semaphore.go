package lock

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// Semaphore is a name that up to a fixed number of holders hold at once,
// each by a permit of its own: a *Lease with its own fencing token (greater
// than every token issued on the name before it, whatever the kind), its own
// TTL and keep-alive, lost and released as any lease. Waiters are served in
// the order they arrived (queued waiting, as Client.Acquire), and TryAcquire never takes a permit that a waiter in line is
// owed.
//
// Fencing: a permit's token fences the resource its holder works on as any
// lease's token does (one resource per holder, a job row say). Because the
// tokens of a semaphore rise over its whole life, a newer permit that takes
// over a resource refuses the writes of an older permit, whichever of the N
// it was.
//
// Every backend shipped with fencekit has semaphores. Its number of
// permits is fixed while the name is in use: a call that asks for another
// number gets an error matching ErrShapeMismatch.
//
// A Semaphore is a value to keep or to make again: it holds no state of its
// own besides its name and number.
type Semaphore struct {
	client *Client
	name   string
	n      int
}

// Semaphore returns the semaphore called name with n permits, 1 to 65536.
// It sends nothing and refuses nothing: a bad name or n (0, say) is refused
// by each call on the semaphore, Inspect included, with an error matching
// ErrInvalid, before anything is sent.
func (c *Client) Semaphore(name string, n int) *Semaphore {
	return &Semaphore{client: c, name: name, n: n}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the semaphore's number of permits.
func (s *Semaphore) Limit() int { return s.n }

// Acquire blocks until it holds a permit, as Client.Acquire blocks until it
// holds a lock: in line, woken when a permit is released, with opts applied
// as there.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	cc, err := s.client.shapeClient(s.name, driver.Semaphore, s.n)
	if err != nil {
		return nil, err
	}
	return cc.Acquire(ctx, s.name, ttl, opts...)
}

// TryAcquire makes one attempt, as Client.TryAcquire: when every permit is
// held, or owed to a waiter in line, it returns an error matching ErrHeld and
// ErrNotAcquired.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...CallOption) (*Lease, error) {
	cc, err := s.client.shapeClient(s.name, driver.Semaphore, s.n)
	if err != nil {
		return nil, err
	}
	return cc.TryAcquire(ctx, s.name, ttl, opts...)
}

// Do runs fn under a permit, as Client.Do runs it under a lock.
func (s *Semaphore) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts ...CallOption) error {
	cc, err := s.client.shapeClient(s.name, driver.Semaphore, s.n)
	if err != nil {
		return err
	}
	return cc.Do(ctx, s.name, ttl, fn, opts...)
}

// TryDo is Do with one attempt, as Client.TryDo.
func (s *Semaphore) TryDo(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, permit *Lease) error, opts ...CallOption) error {
	cc, err := s.client.shapeClient(s.name, driver.Semaphore, s.n)
	if err != nil {
		return err
	}
	return cc.TryDo(ctx, s.name, ttl, fn, opts...)
}

// Inspect reports the semaphore's live permits and waiters. It changes
// nothing.
func (s *Semaphore) Inspect(ctx context.Context) (Info, error) {
	if _, err := s.client.shapeClient(s.name, driver.Semaphore, s.n); err != nil {
		return Info{}, err
	}
	return s.client.inspectPermits(ctx, s.name)
}

// inspectPermits asks c's backend about the permit name called name.
func (c *Client) inspectPermits(ctx context.Context, name string) (Info, error) {
	cc, err := c.shapeClient(name, driver.Write, 0)
	if err != nil {
		return Info{}, err
	}
	di, err := cc.inspect(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return infoOf(di), nil
}
