package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// permitRecording is the backend a permit run's Client uses: the
// configured backend, whose AcquirePermit calls it records (grant). Its
// other permit calls go straight through.
type permitRecording struct {
	lock.Backend
	pb lock.PermitBackend
	p  *permitRun
}

var _ lock.PermitBackend = permitRecording{}

// AcquirePermit records the attempt: a grant when it returns a permit.
func (b permitRecording) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	call := b.p.r.now()
	pm, err := b.pb.AcquirePermit(ctx, name, owner, req)
	b.p.attempt(name, owner, req.Kind, pm, err, call, b.p.r.now())
	return pm, err
}

// ExtendPermit goes to the backend.
func (b permitRecording) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.pb.ExtendPermit(ctx, name, owner, ttl)
}

// ReleasePermit goes to the backend.
func (b permitRecording) ReleasePermit(ctx context.Context, name, owner string) error {
	return b.pb.ReleasePermit(ctx, name, owner)
}

// AwaitPermit goes to the backend.
func (b permitRecording) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	return b.pb.AwaitPermit(ctx, name, owner, max)
}

// LeavePermitLine goes to the backend.
func (b permitRecording) LeavePermitLine(ctx context.Context, name, owner string) error {
	return b.pb.LeavePermitLine(ctx, name, owner)
}

// InspectPermits goes to the backend.
func (b permitRecording) InspectPermits(ctx context.Context, name string) (lock.Permits, error) {
	return b.pb.InspectPermits(ctx, name)
}

// attempt notes one AcquirePermit. A refusal (held, another shape, bad
// input) minted nothing, so the owner's window starts again; a failure of
// unknown outcome may have minted the token a later attempt returns, so the
// window of that grant starts at the earliest such failure.
func (p *permitRun) attempt(name, owner string, kind lock.PermitKind, pm lock.Permit, err error, call, ret int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil:
		start, ok := p.pending[owner]
		if !ok || start > call {
			start = call
		}
		delete(p.pending, owner)
		p.grants = append(p.grants, grant{Name: name, Owner: owner, Kind: kind,
			Token: int64(pm.Token), Prior: int64(pm.PriorWriter), Call: start, Return: ret})
		switch kind {
		case lock.ReadPermit:
			p.readGrants++
		case lock.WritePermit:
			p.writeGrants++
		default:
			p.semGrants++
		}
	case errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrShapeMismatch) || errors.Is(err, fence.ErrInvalid):
		delete(p.pending, owner)
		p.notGranted++
	default:
		if _, ok := p.pending[owner]; !ok {
			p.pending[owner] = call
		}
	}
}
