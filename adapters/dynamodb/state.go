package dynamodb

import (
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// state is what a Backend keeps for one lock or one permit name, in the
// name's item: its holders and its line of waiters. The token counter and
// the item's revision are attributes of their own (item.go). The admission
// rules below are the driver contract's, over entries whose expiry the
// Backend judges by watching them (watch.go), never by a clock stored in
// the item.
type state struct {
	// LastWriter is the newest Write permit's token (permit names only).
	LastWriter fence.Token `json:"w,omitempty"`
	// Shape and Limit, while a permit or a place is live: driver.Semaphore
	// with its limit, or driver.Write for a read-write lock.
	Shape   driver.Kind `json:"s,omitempty"`
	Limit   int         `json:"l,omitempty"`
	Holders []entry     `json:"h,omitempty"`
	Line    []entry     `json:"q,omitempty"` // first in line first
}

// entry is one lease (a holder) or one place in line.
type entry struct {
	Owner string      `json:"o"`
	Kind  driver.Kind `json:"k"`
	Token fence.Token `json:"t,omitempty"`
	Prior fence.Token `json:"p,omitempty"` // the name's last writer when this permit was granted
	// TTL is how long the entry lives after it was last renewed, as a
	// duration: never a time on anyone's clock.
	TTL time.Duration `json:"d"`
	// Ver is the item revision that last renewed the entry; a renewal
	// makes a new one, so a watcher that sees the same Ver sees an entry
	// nobody has renewed since.
	Ver  int64  `json:"v"`
	Meta string `json:"m,omitempty"`
}

// ages tells how long the Backend has watched each entry of one read of
// the state unchanged (watch.go).
type ages interface {
	age(e entry, line bool) time.Duration
}

// expired says whether e has certainly run out: watched unchanged for
// longer than its TTL, widened by clockDrift (this machine's clock may run
// slower than the holder's).
func expired(a ages, e entry, line bool) bool {
	return a.age(e, line) >= e.TTL+time.Duration(float64(e.TTL)*clockDrift)
}

// remaining is the time until e runs out as this Backend judges it.
func remaining(a ages, e entry, line bool) time.Duration {
	return max(e.TTL-a.age(e, line), 0)
}

// clockDrift bounds how much slower this machine's clock may run than a
// holder's, as a fraction: 500 ppm, the fastest rate at which an NTP
// daemon slews a clock.
const clockDrift = 500e-6

// dropExpired removes the holders and places that have run out, and forgets
// a permit name's shape once nothing is live.
func (s *state) dropExpired(a ages) {
	s.Holders = slices.DeleteFunc(s.Holders, func(e entry) bool { return expired(a, e, false) })
	s.Line = slices.DeleteFunc(s.Line, func(e entry) bool { return expired(a, e, true) })
	if s.idle() {
		s.Shape, s.Limit = 0, 0
	}
}

func (s *state) idle() bool { return len(s.Holders) == 0 && len(s.Line) == 0 }

func (s *state) holder(owner string) int {
	return slices.IndexFunc(s.Holders, func(e entry) bool { return e.Owner == owner })
}

func (s *state) place(owner string) int {
	return slices.IndexFunc(s.Line, func(e entry) bool { return e.Owner == owner })
}

func (s *state) removePlace(at int) {
	if at >= 0 {
		s.Line = slices.Delete(s.Line, at, at+1)
	}
}

// soonest is the time until the earliest live holder runs out, 0 if none.
func (s *state) soonest(a ages) time.Duration {
	var d time.Duration
	for i, e := range s.Holders {
		if left := remaining(a, e, false); i == 0 || left < d {
			d = left
		}
	}
	return d
}

// admits says whether a request of kind, with the places in ahead before
// it, is let in.
func (s *state) admits(kind driver.Kind, ahead []entry) bool {
	switch kind {
	case driver.Exclusive, driver.Write:
		return len(s.Holders) == 0 && len(ahead) == 0
	case driver.Semaphore:
		return len(s.Holders)+len(ahead) < s.Limit
	default: // driver.Read
		for _, h := range s.Holders {
			if h.Kind == driver.Write {
				return false
			}
		}
		return !slices.ContainsFunc(ahead, func(e entry) bool { return e.Kind == driver.Write })
	}
}

// change is what one call does to a name's state: the new state to write
// (nil: write nothing), how many tokens it mints, and what the call
// returns once the write is done.
type change struct {
	write  bool
	minted int
	grant  driver.Grant
	err    error
}

// acquire applies req to the state of its name (expired entries already
// dropped), whose counter is counter, with ver the revision a write would
// make. It follows the driver contract's rules for one name.
func (s *state) acquire(req driver.Request, counter fence.Token, ver int64, a ages) change {
	name, owner := req.Name, req.Owner
	if req.Kind.Permit() && !s.idle() && !driver.SameShape(s.Shape, s.Limit, req) {
		return change{err: driver.ShapeMismatch(name, s.Shape, s.Limit, req)}
	}
	at := s.place(owner)
	if h := s.holder(owner); h >= 0 {
		e := &s.Holders[h]
		if e.Kind != req.Kind {
			return change{err: fmt.Errorf("%w: owner holds a %v permit on %q, asked for %v", driver.ErrShapeMismatch, e.Kind, name, req.Kind)}
		}
		e.TTL, e.Ver = req.TTL, ver
		if req.Kind == driver.Exclusive && !req.Resume {
			e.Meta = req.Metadata
		}
		s.removePlace(at)
		return change{write: true, grant: driver.Grant{Token: e.Token, PriorWriter: e.Prior}}
	}
	if req.Resume {
		return change{err: driver.NotHeld(name)}
	}
	if req.Kind.Permit() && s.idle() {
		s.Shape, s.Limit = req.Kind, req.Limit
		if req.Kind != driver.Semaphore {
			s.Shape = driver.Write
		}
	}
	ahead := s.Line
	switch {
	case at >= 0:
		ahead = s.Line[:at]
	case req.Kind == driver.Exclusive && req.Place == 0:
		ahead = nil // a lock's TryAcquire may barge
	}
	if s.admits(req.Kind, ahead) {
		e := entry{Owner: owner, Kind: req.Kind, Token: counter + 1, TTL: req.TTL, Ver: ver}
		if req.Kind == driver.Exclusive {
			e.Meta = req.Metadata
		} else {
			e.Prior = s.LastWriter
			if req.Kind == driver.Write {
				s.LastWriter = e.Token
			}
		}
		s.Holders = append(s.Holders, e)
		s.removePlace(at)
		return change{write: true, minted: 1, grant: driver.Grant{Token: e.Token, PriorWriter: e.Prior}}
	}
	held := &driver.HeldError{Name: name, Kind: req.Kind}
	if req.Kind == driver.Semaphore {
		held.Permits = s.Limit
	}
	if req.Place == 0 {
		held.TTL = s.soonest(a)
		return change{err: held}
	}
	if at < 0 {
		at = len(s.Line)
		s.Line = append(s.Line, entry{Owner: owner, Kind: req.Kind})
	}
	s.Line[at].TTL, s.Line[at].Ver = req.Place, ver
	if at == 0 {
		held.TTL = s.soonest(a)
	}
	return change{write: true, err: held}
}

// extend renews owner's live lease (for a permit name, its permit of any
// kind) to ttl.
func (s *state) extend(name, owner string, ttl time.Duration, ver int64) change {
	h := s.holder(owner)
	if h < 0 {
		return change{err: driver.NotHeld(name)}
	}
	s.Holders[h].TTL, s.Holders[h].Ver = ttl, ver
	return change{write: true}
}

// release removes owner's live lease.
func (s *state) release(name, owner string) change {
	h := s.holder(owner)
	if h < 0 {
		return change{err: driver.NotHeld(name)}
	}
	s.Holders = slices.Delete(s.Holders, h, h+1)
	if s.idle() {
		s.Shape, s.Limit = 0, 0
	}
	return change{write: true}
}

// leave removes owner's place in line, if it has one.
func (s *state) leave(owner string) change {
	at := s.place(owner)
	if at < 0 {
		return change{}
	}
	s.removePlace(at)
	if s.idle() {
		s.Shape, s.Limit = 0, 0
	}
	return change{write: true}
}

// letsIn says whether owner's place in line would be admitted now, or it
// has none: what Await waits for.
func (s *state) letsIn(owner string) bool {
	at := s.place(owner)
	if at < 0 {
		return true // no place: nothing to wait for
	}
	return s.admits(s.Line[at].Kind, s.Line[:at])
}

// info reports the state as driver.Info.
func (s *state) info(name string, kind driver.Kind, a ages) driver.Info {
	info := driver.Info{Name: name, Waiting: len(s.Line)}
	if kind.Permit() {
		info.Kind, info.Limit, info.LastWriter = s.Shape, 0, s.LastWriter
		if s.Shape == driver.Semaphore {
			info.Limit = s.Limit
		}
	} else {
		info.Kind = driver.Exclusive
	}
	for _, e := range s.Holders {
		info.Holders = append(info.Holders, driver.Holder{
			Owner: e.Owner, Kind: e.Kind, Token: e.Token, TTL: remaining(a, e, false), Metadata: e.Meta,
		})
	}
	return info
}
