package memory

import (
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitName is the state of one semaphore or read-write lock.
type permitName struct {
	last       fence.Token // the highest token ever minted on the name
	lastWriter fence.Token // the newest write permit's token
	// shape, while a permit or place is live: driver.Semaphore with its
	// limit, or driver.Write for a read-write lock.
	shape   driver.Kind
	limit   int
	holders map[string]permitHolder
	line    []*permitPlace // first in line first
}

type permitHolder struct {
	kind    driver.Kind
	token   fence.Token
	prior   fence.Token // the name's last writer when this permit was granted
	expires time.Time
}

type permitPlace struct {
	owner   string
	kind    driver.Kind
	expires time.Time
	wake    chan struct{} // buffered (1): a wake-up before Await is kept
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
func (p *permitName) admits(kind driver.Kind, ahead []*permitPlace) bool {
	switch kind {
	case driver.Semaphore:
		return len(p.holders)+len(ahead) < p.limit
	case driver.Write:
		return len(p.holders) == 0 && len(ahead) == 0
	default: // driver.Read
		for _, h := range p.holders {
			if h.kind == driver.Write {
				return false
			}
		}
		return !slices.ContainsFunc(ahead, func(pl *permitPlace) bool { return pl.kind == driver.Write })
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

// acquirePermit takes a permit on the semaphore or read-write lock
// req.Name for req.Owner, or keeps the owner's place in its line, as the
// driver contract says. The caller holds b.mu.
func (b *Backend) acquirePermit(req driver.Request, now time.Time) (driver.Grant, error) {
	name, owner := req.Name, req.Owner
	p := b.permitState(name, now)
	if !p.idle() && !driver.SameShape(p.shape, p.limit, req) {
		return driver.Grant{}, driver.ShapeMismatch(name, p.shape, p.limit, req)
	}
	at := slices.IndexFunc(p.line, func(pl *permitPlace) bool { return pl.owner == owner })
	if h, ok := p.holders[owner]; ok {
		if h.kind != req.Kind {
			return driver.Grant{}, fmt.Errorf("%w: owner holds a %v permit on %q, asked for %v", driver.ErrShapeMismatch, h.kind, name, req.Kind)
		}
		h.expires = now.Add(req.TTL)
		p.holders[owner] = h
		p.removePlace(at)
		return driver.Grant{Token: h.token, PriorWriter: h.prior}, nil
	}
	if p.idle() {
		p.shape, p.limit = req.Kind, req.Limit
		if req.Kind != driver.Semaphore {
			p.shape = driver.Write
		}
	}
	ahead := p.line
	if at >= 0 {
		ahead = p.line[:at]
	}
	if p.admits(req.Kind, ahead) {
		p.last++
		h := permitHolder{kind: req.Kind, token: p.last, prior: p.lastWriter, expires: now.Add(req.TTL)}
		if req.Kind == driver.Write {
			p.lastWriter = h.token
		}
		p.holders[owner] = h
		p.removePlace(at)
		return driver.Grant{Token: h.token, PriorWriter: h.prior}, nil
	}
	held := &driver.HeldError{Name: name, TTL: p.soonest(now), Kind: req.Kind, Permits: semaphoreLimit(p)}
	if req.Place == 0 {
		if p.idle() {
			p.shape, p.limit = 0, 0
		}
		return driver.Grant{}, held
	}
	if at < 0 {
		at = len(p.line)
		p.line = append(p.line, &permitPlace{owner: owner, kind: req.Kind, wake: wake.NewBox()})
	}
	p.line[at].expires = now.Add(req.Place)
	return driver.Grant{}, held
}

func (p *permitName) removePlace(at int) {
	if at >= 0 {
		p.line = slices.Delete(p.line, at, at+1)
		p.wakeAll() // those behind may now be let in
	}
}

// extendPermit renews owner's live permit on name for ttl from now. The
// caller holds b.mu.
func (b *Backend) extendPermit(name, owner string, ttl time.Duration, now time.Time) error {
	p := b.permitState(name, now)
	h, ok := p.holders[owner]
	if !ok {
		return driver.NotHeld(name)
	}
	h.expires = now.Add(ttl)
	p.holders[owner] = h
	return nil
}

// releasePermit gives up owner's permit on name and wakes its line. The
// caller holds b.mu.
func (b *Backend) releasePermit(name, owner string, now time.Time) error {
	p := b.permitState(name, now)
	if _, ok := p.holders[owner]; !ok {
		return driver.NotHeld(name)
	}
	delete(p.holders, owner)
	p.wakeAll()
	return nil
}

// permitWakeBox returns the wake-up box of owner's place in name's line,
// nil when it has none. The caller holds b.mu.
func (b *Backend) permitWakeBox(name, owner string) chan struct{} {
	if p := b.permits[name]; p != nil {
		for _, pl := range p.line {
			if pl.owner == owner {
				return pl.wake
			}
		}
	}
	return nil
}

// leavePermitLine removes owner's place from name's line. The caller holds
// b.mu.
func (b *Backend) leavePermitLine(name, owner string, now time.Time) {
	p := b.permitState(name, now)
	p.removePlace(slices.IndexFunc(p.line, func(pl *permitPlace) bool { return pl.owner == owner }))
}

// inspectPermits reports name's shape, live permits, waiters and last
// writer. The caller holds b.mu.
func (b *Backend) inspectPermits(name string, now time.Time) driver.Info {
	p := b.permitState(name, now)
	info := driver.Info{Name: name, Kind: p.shape, Limit: p.limit, Waiting: len(p.line), LastWriter: p.lastWriter}
	for o, h := range p.holders {
		info.Holders = append(info.Holders, driver.Holder{Owner: o, Kind: h.kind, Token: h.token, TTL: h.expires.Sub(now)})
	}
	return info
}

// semaphoreLimit is p's number of permits when it is a semaphore, else 0.
func semaphoreLimit(p *permitName) int {
	if p.shape == driver.Semaphore {
		return p.limit
	}
	return 0
}
