package chaos

import (
	"context"
	"errors"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitRecording is the backend a permit run's Client uses: the
// configured backend, whose permit Acquire calls it records (grant). Every
// other call goes straight through.
type permitRecording struct {
	driver.Backend
	p *permitRun
}

// Acquire records the attempt of a permit: a grant when it returns one.
func (b permitRecording) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	call := b.p.r.now()
	g, err := b.Backend.Acquire(ctx, req)
	if req.Kind.Permit() {
		b.p.attempt(req.Name, req.Owner, req.Kind, g, err, call, b.p.r.now())
	}
	return g, err
}

// attempt notes one Acquire of a permit. A refusal (held, another shape,
// bad input, a shape the backend does not serve) minted nothing, so the
// owner's window starts again; a failure of unknown outcome may have minted
// the token a later attempt returns, so the window of that grant starts at
// the earliest such failure.
func (p *permitRun) attempt(name, owner string, kind driver.Kind, g driver.Grant, err error, call, ret int64) {
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
			Token: int64(g.Token), Prior: int64(g.PriorWriter), Call: start, Return: ret})
		switch kind {
		case driver.Read:
			p.readGrants++
		case driver.Write:
			p.writeGrants++
		default:
			p.semGrants++
		}
	case errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrShapeMismatch) || errors.Is(err, fence.ErrInvalid) ||
		errors.Is(err, driver.ErrUnsupported):
		delete(p.pending, owner)
		p.notGranted++
	default:
		if _, ok := p.pending[owner]; !ok {
			p.pending[owner] = call
		}
	}
}
