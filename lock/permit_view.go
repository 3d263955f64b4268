package lock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// permitView shows one kind of permit on a PermitBackend as a QueueBackend,
// so that a semaphore's or a read-write lock's acquire runs through the
// Client's own acquire loop, queued waiting, keep-alive, Do and release,
// unchanged: a permit is a lease whose backend calls are the permit calls.
//
// A view serves one call of the Client, which uses one owner value: it
// remembers that owner (for Inspect, which Lease.TTL asks about its own
// lease) and the PriorWriter of the grant (for Lease.PriorWriter).
type permitView struct {
	pb   PermitBackend
	kind PermitKind
	n    int // a semaphore's limit

	mu    sync.Mutex
	owner string
	prior fence.Token
}

var _ QueueBackend = (*permitView)(nil)

func (v *permitView) request(ttl, place time.Duration) PermitRequest {
	return PermitRequest{Kind: v.kind, Limit: v.n, TTL: ttl, Place: place}
}

func (v *permitView) grant(owner string, p Permit, err error) (fence.Token, error) {
	if err != nil {
		return 0, err
	}
	v.mu.Lock()
	v.owner, v.prior = owner, p.PriorWriter
	v.mu.Unlock()
	return p.Token, nil
}

// Acquire takes a permit without waiting in line.
func (v *permitView) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	p, err := v.pb.AcquirePermit(ctx, name, owner, v.request(ttl, 0))
	return v.grant(owner, p, err)
}

// AcquireOrEnqueue takes a permit, or keeps owner's place in line.
func (v *permitView) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	p, err := v.pb.AcquirePermit(ctx, name, owner, v.request(ttl, place))
	return v.grant(owner, p, err)
}

func (v *permitView) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	return v.pb.ExtendPermit(ctx, name, owner, ttl)
}

func (v *permitView) Release(ctx context.Context, name, owner string) error {
	return v.pb.ReleasePermit(ctx, name, owner)
}

func (v *permitView) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	return v.pb.AwaitPermit(ctx, name, owner, max)
}

func (v *permitView) LeaveQueue(ctx context.Context, name, owner string) error {
	return v.pb.LeavePermitLine(ctx, name, owner)
}

// Inspect reports the permit of the view's owner as the lock's holder, so
// that Lease.TTL sees its own permit; Held is false when that owner holds
// none.
func (v *permitView) Inspect(ctx context.Context, name string) (Info, error) {
	ps, err := v.pb.InspectPermits(ctx, name)
	if err != nil {
		return Info{}, err
	}
	v.mu.Lock()
	owner := v.owner
	v.mu.Unlock()
	for _, h := range ps.Holders {
		if h.Owner == owner && owner != "" {
			return Info{Name: name, Held: true, Owner: h.Owner, Token: h.Token, TTL: h.TTL}, nil
		}
	}
	return Info{Name: name}, nil
}

// priorWriter returns what the view's grant said of the name's last writer;
// ok is false when b is no permit view.
func priorWriter(b Backend) (fence.Token, bool) {
	if e, isQueue := b.(enqueuer); isQueue {
		b = e.QueueBackend
	}
	v, ok := b.(*permitView)
	if !ok {
		return 0, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.prior, true
}

// permitClient returns a copy of c whose backend is a view of kind on c's
// PermitBackend, or an error matching ErrUnsupported when c's backend has no
// permits.
func (c *Client) permitClient(kind PermitKind, n int) (*Client, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	pb, ok := c.backend.(PermitBackend)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a lock.PermitBackend", ErrUnsupported, c.backend)
	}
	if kind == SemaphorePermit && (n < 1 || n > MaxPermits) {
		return nil, fence.Invalid("semaphore limit %d is outside 1 to %d", n, MaxPermits)
	}
	cc := *c
	cc.backend = &permitView{pb: pb, kind: kind, n: n}
	return &cc, nil
}
