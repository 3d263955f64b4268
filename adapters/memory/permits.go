package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.PermitBackend = (*Backend)(nil)

// permitName is the state of one semaphore or read-write lock.
type permitName struct {
	last       fence.Token // the highest token ever minted on the name
	lastWriter fence.Token // the newest write permit's token
	// shape, while a permit or place is live: SemaphorePermit with its
	// limit, or WritePermit for a read-write lock.
	shape   lock.PermitKind
	limit   int
	holders map[string]permitHolder
	line    []*permitPlace // first in line first
}

type permitHolder struct {
	kind    lock.PermitKind
	token   fence.Token
	prior   fence.Token // the name's last writer when this permit was granted
	expires time.Time
}

type permitPlace struct {
	owner   string
	kind    lock.PermitKind
	expires time.Time
	wake    chan struct{} // buffered (1): a wake-up before AwaitPermit is kept
}

// permitState returns name's state, with every expired permit and place
// dropped. The caller holds b.mu.
func (b *Backend) permitState(name string, now time.Time) *permitName {
	p := b.permits[name]
	if p == nil {
		p = &permitName{holders: map[string]permitHolder{}}
		b.permits[name] = p
	}
	dropped := false
	for o, h := range p.holders {
		if !now.Before(h.expires) {
			delete(p.holders, o)
			dropped = true
		}
	}
	n := len(p.line)
	p.line = slices.DeleteFunc(p.line, func(pl *permitPlace) bool { return !now.Before(pl.expires) })
	if dropped || len(p.line) != n {
		p.wakeAll() // room may have been made: let the line ask again
	}
	if p.idle() {
		p.shape, p.limit = 0, 0
	}
	return p
}

func (p *permitName) idle() bool { return len(p.holders) == 0 && len(p.line) == 0 }

func (p *permitName) wakeAll() {
	for _, pl := range p.line {
		wake.Post(pl.wake)
	}
}

// admits says whether owner, with the places in ahead before it, may take
// a permit of kind.
func (p *permitName) admits(kind lock.PermitKind, ahead []*permitPlace) bool {
	switch kind {
	case lock.SemaphorePermit:
		return len(p.holders)+len(ahead) < p.limit
	case lock.WritePermit:
		return len(p.holders) == 0 && len(ahead) == 0
	default: // ReadPermit
		for _, h := range p.holders {
			if h.kind == lock.WritePermit {
				return false
			}
		}
		return !slices.ContainsFunc(ahead, func(pl *permitPlace) bool { return pl.kind == lock.WritePermit })
	}
}

// soonest is the time until the earliest live permit expires, 0 if none.
func (p *permitName) soonest(now time.Time) time.Duration {
	var d time.Duration
	for _, h := range p.holders {
		if left := h.expires.Sub(now); d == 0 || left < d {
			d = left
		}
	}
	return d
}

// AcquirePermit takes a permit on the semaphore or read-write lock name for
// owner, or keeps owner's place in its line, as lock.PermitBackend says.
func (b *Backend) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	if err := lock.ValidatePermit(name, owner, req); err != nil {
		return lock.Permit{}, err
	}
	if err := ctx.Err(); err != nil {
		return lock.Permit{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	p := b.permitState(name, now)
	if !p.idle() && !lock.SameShape(p.shape, p.limit, req) {
		return lock.Permit{}, lock.ShapeMismatch(name, p.shape, p.limit, req)
	}
	at := slices.IndexFunc(p.line, func(pl *permitPlace) bool { return pl.owner == owner })
	if h, ok := p.holders[owner]; ok {
		if h.kind != req.Kind {
			return lock.Permit{}, fmt.Errorf("%w: owner holds a %v permit on %q, asked for %v", lock.ErrShapeMismatch, h.kind, name, req.Kind)
		}
		h.expires = now.Add(req.TTL)
		p.holders[owner] = h
		p.removePlace(at)
		return lock.Permit{Token: h.token, PriorWriter: h.prior}, nil
	}
	if p.idle() {
		p.shape, p.limit = req.Kind, req.Limit
		if req.Kind != lock.SemaphorePermit {
			p.shape = lock.WritePermit
		}
	}
	ahead := p.line
	if at >= 0 {
		ahead = p.line[:at]
	}
	if p.admits(req.Kind, ahead) {
		p.last++
		h := permitHolder{kind: req.Kind, token: p.last, prior: p.lastWriter, expires: now.Add(req.TTL)}
		if req.Kind == lock.WritePermit {
			p.lastWriter = h.token
		}
		p.holders[owner] = h
		p.removePlace(at)
		return lock.Permit{Token: h.token, PriorWriter: h.prior}, nil
	}
	held := &lock.HeldError{Name: name, TTL: p.soonest(now)}
	if req.Place == 0 {
		if p.idle() {
			p.shape, p.limit = 0, 0
		}
		return lock.Permit{}, held
	}
	if at < 0 {
		at = len(p.line)
		p.line = append(p.line, &permitPlace{owner: owner, kind: req.Kind, wake: wake.NewBox()})
	}
	p.line[at].expires = now.Add(req.Place)
	return lock.Permit{}, held
}

func (p *permitName) removePlace(at int) {
	if at >= 0 {
		p.line = slices.Delete(p.line, at, at+1)
		p.wakeAll() // those behind may now be let in
	}
}

// ExtendPermit renews owner's live permit on name for ttl from now.
func (b *Backend) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	p := b.permitState(name, now)
	h, ok := p.holders[owner]
	if !ok {
		return notHeld(name)
	}
	h.expires = now.Add(ttl)
	p.holders[owner] = h
	return nil
}

// ReleasePermit gives up owner's permit on name and wakes its line.
func (b *Backend) ReleasePermit(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.permitState(name, b.now())
	if _, ok := p.holders[owner]; !ok {
		return notHeld(name)
	}
	delete(p.holders, owner)
	p.wakeAll()
	return nil
}

// AwaitPermit blocks until owner is woken, max has passed or ctx ends. It
// returns at once when owner has no place in name's line.
func (b *Backend) AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	b.mu.Lock()
	var box chan struct{}
	if p := b.permits[name]; p != nil {
		for _, pl := range p.line {
			if pl.owner == owner {
				box = pl.wake
			}
		}
	}
	b.mu.Unlock()
	if box == nil {
		return ctx.Err()
	}
	return wake.Wait(ctx, box, max)
}

// LeavePermitLine removes owner's place from name's line.
func (b *Backend) LeavePermitLine(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.permitState(name, b.now())
	p.removePlace(slices.IndexFunc(p.line, func(pl *permitPlace) bool { return pl.owner == owner }))
	return nil
}

// InspectPermits reports name's shape, live permits, waiters and last
// writer.
func (b *Backend) InspectPermits(ctx context.Context, name string) (lock.Permits, error) {
	if err := fence.ValidateKey(name); err != nil {
		return lock.Permits{}, fmt.Errorf("lock name: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return lock.Permits{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	p := b.permitState(name, now)
	ps := lock.Permits{Name: name, Kind: p.shape, Limit: p.limit, Waiting: len(p.line), LastWriter: p.lastWriter}
	for o, h := range p.holders {
		ps.Holders = append(ps.Holders, lock.PermitHolder{Owner: o, Kind: h.kind, Token: h.token, TTL: h.expires.Sub(now)})
	}
	return ps, nil
}
