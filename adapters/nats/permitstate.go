package nats

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// PermitKey is the KV key that holds the whole state of the permit name
// name (a semaphore or a read-write lock), apart from the single-holder
// locks: "<prefix>.permit.<base64url(name)>". Its last message is the
// name's shape, its permits and its line of places, each with an expiry on
// the server's clock, and its last writer (see permitState).
func (b *Backend) PermitKey(name string) string { return b.b.key("permit", name) }

// permitFormat is the version of a permit key's data.
const permitFormat = 1

// permitState is a permit name's state, as one message of its key holds it.
// Expiries are Unix nanoseconds on the clock of the stream's leader (see
// serverClock); an entry whose expiry has passed is still in the message
// until a write drops it, and every reader leaves it out.
type permitState struct {
	// shape while any permit or place is live: Semaphore with its limit,
	// or Write for a read-write lock; 0 when idle.
	shape driver.Kind
	limit int
	// holders are the permits, in no particular order. A holder whose
	// token is 0 was granted by the message being written: its token is
	// that message's revision, which the leader assigns (see resolve).
	holders []permitHolder
	// line is the places, first in line first.
	line []permitPlace
	// lastWriter is the token of the newest write permit ever granted on
	// the name; it outlives every shape.
	lastWriter fence.Token
}

type permitHolder struct {
	owner   string
	kind    driver.Kind
	token   fence.Token
	prior   fence.Token // the last writer when this permit was granted
	expires int64
}

type permitPlace struct {
	owner   string
	kind    driver.Kind
	expires int64
}

// permitWire is a permit key's data: JSON, with kinds and shapes as
// kindCode writes them.
type permitWire struct {
	V       int          `json:"v"`
	Shape   int          `json:"shape,omitempty"`
	Limit   int          `json:"limit,omitempty"`
	Holders []holderWire `json:"holders,omitempty"`
	Line    []placeWire  `json:"line,omitempty"`
	Writer  int64        `json:"writer,omitempty"`
}

type holderWire struct {
	Owner   string `json:"owner"`
	Kind    int    `json:"kind"`
	Token   int64  `json:"token,omitempty"`
	Prior   int64  `json:"prior,omitempty"`
	Expires int64  `json:"expires"`
}

type placeWire struct {
	Owner   string `json:"owner"`
	Kind    int    `json:"kind"`
	Expires int64  `json:"expires"`
}

// encode is st as a message's data. At most one holder may have token 0:
// the permit the message grants.
func (st permitState) encode() []byte {
	w := permitWire{V: permitFormat, Shape: kindCode(st.shape), Limit: st.limit, Writer: int64(st.lastWriter)}
	for _, h := range st.holders {
		w.Holders = append(w.Holders, holderWire{Owner: h.owner, Kind: kindCode(h.kind), Token: int64(h.token), Prior: int64(h.prior), Expires: h.expires})
	}
	for _, p := range st.line {
		w.Line = append(w.Line, placeWire{Owner: p.owner, Kind: kindCode(p.kind), Expires: p.expires})
	}
	data, err := json.Marshal(w)
	if err != nil {
		panic(err) // strings, ints and slices of them always marshal
	}
	return data
}

// decodePermits reads a permit key's data, unresolved: a holder granted by
// that message has token 0 (see resolve).
func decodePermits(data []byte) (permitState, error) {
	var w permitWire
	if err := json.Unmarshal(data, &w); err != nil {
		return permitState{}, fmt.Errorf("%w: permit state: %v", ErrMalformedRecord, err)
	}
	if w.V != permitFormat {
		return permitState{}, fmt.Errorf("%w: permit state of format %d, not %d", ErrMalformedRecord, w.V, permitFormat)
	}
	st := permitState{shape: kindOf(w.Shape), limit: w.Limit, lastWriter: fence.Token(w.Writer)}
	switch {
	case w.Shape == 0 && st.limit == 0, st.shape == driver.Write && st.limit == 0:
	case st.shape == driver.Semaphore && st.limit >= 1 && st.limit <= driver.MaxPermits:
	default:
		return permitState{}, fmt.Errorf("%w: permit state of shape %d and limit %d", ErrMalformedRecord, w.Shape, w.Limit)
	}
	if w.Writer < 0 {
		return permitState{}, fmt.Errorf("%w: permit state with last writer %d", ErrMalformedRecord, w.Writer)
	}
	minted := 0
	for _, h := range w.Holders {
		if kindOf(h.Kind) == 0 || h.Owner == "" || h.Token < 0 || h.Prior < 0 {
			return permitState{}, fmt.Errorf("%w: permit holder %+v", ErrMalformedRecord, h)
		}
		if h.Token == 0 {
			minted++
		}
		st.holders = append(st.holders, permitHolder{owner: h.Owner, kind: kindOf(h.Kind), token: fence.Token(h.Token), prior: fence.Token(h.Prior), expires: h.Expires})
	}
	if minted > 1 {
		return permitState{}, fmt.Errorf("%w: permit state grants %d permits in one message", ErrMalformedRecord, minted)
	}
	for _, p := range w.Line {
		if kindOf(p.Kind) == 0 || p.Owner == "" {
			return permitState{}, fmt.Errorf("%w: permit place %+v", ErrMalformedRecord, p)
		}
		st.line = append(st.line, permitPlace{owner: p.Owner, kind: kindOf(p.Kind), expires: p.Expires})
	}
	if (len(st.holders) > 0 || len(st.line) > 0) && st.shape == 0 {
		return permitState{}, fmt.Errorf("%w: permit state with permits or places and no shape", ErrMalformedRecord)
	}
	return st, nil
}

// kindCode is how a permit key writes a kind: 1 for Semaphore, 2 for Read,
// 3 for Write, the codes it has always written (they are not driver.Kind's
// values), so that states written by an earlier release, or by a client of
// one during an upgrade, read the same.
func kindCode(k driver.Kind) int {
	switch k {
	case driver.Semaphore:
		return 1
	case driver.Read:
		return 2
	case driver.Write:
		return 3
	}
	return 0
}

// kindOf reads a kindCode; 0 for anything else.
func kindOf(code int) driver.Kind {
	switch code {
	case 1:
		return driver.Semaphore
	case 2:
		return driver.Read
	case 3:
		return driver.Write
	}
	return 0
}

// resolve gives the permit that the message of revision seq granted (token
// 0) its token, seq, and makes it the last writer when it is a write
// permit: a message that grants a write permit carries the writer before
// it, which is the new permit's PriorWriter.
func (st permitState) resolve(seq uint64) (permitState, error) {
	for i, h := range st.holders {
		if h.token != 0 {
			continue
		}
		tok := fence.Token(seq)
		if !tok.Valid() {
			return permitState{}, fmt.Errorf("%w: revision %d exceeds the largest token", ErrMalformedRecord, seq)
		}
		st.holders = slices.Clone(st.holders)
		st.holders[i].token = tok
		if h.kind == driver.Write {
			st.lastWriter = tok
		}
	}
	return st, nil
}

// live returns st without the permits and places whose expiry is at or
// before now (a lower bound of the server's clock), and without its shape
// when nothing is left.
func (st permitState) live(now int64) permitState {
	st.holders = slices.DeleteFunc(slices.Clone(st.holders), func(h permitHolder) bool { return h.expires <= now })
	st.line = slices.DeleteFunc(slices.Clone(st.line), func(p permitPlace) bool { return p.expires <= now })
	if st.idle() {
		st.shape, st.limit = 0, 0
	}
	return st
}

func (st permitState) idle() bool { return len(st.holders) == 0 && len(st.line) == 0 }

func (st permitState) holder(owner string) int {
	return slices.IndexFunc(st.holders, func(h permitHolder) bool { return h.owner == owner })
}

func (st permitState) place(owner string) int {
	return slices.IndexFunc(st.line, func(p permitPlace) bool { return p.owner == owner })
}

// ahead returns the places before owner's, every place when owner has
// none.
func (st permitState) ahead(owner string) []permitPlace {
	if i := st.place(owner); i >= 0 {
		return st.line[:i]
	}
	return st.line
}

// aheadExpires is the earliest expiry of the places ahead of owner's, 0
// when none is ahead.
func (st permitState) aheadExpires(owner string) int64 {
	var e int64
	for _, p := range st.ahead(owner) {
		if e == 0 || p.expires < e {
			e = p.expires
		}
	}
	return e
}

// admits applies the driver contract's admission rule: whether owner, with
// the places ahead before its own, may take a permit of kind.
func (st permitState) admits(kind driver.Kind, ahead []permitPlace) bool {
	switch kind {
	case driver.Semaphore:
		return len(st.holders)+len(ahead) < st.limit
	case driver.Write:
		return len(st.holders) == 0 && len(ahead) == 0
	}
	if slices.ContainsFunc(st.holders, func(h permitHolder) bool { return h.kind == driver.Write }) {
		return false
	}
	return !slices.ContainsFunc(ahead, func(p permitPlace) bool { return p.kind == driver.Write })
}

// withoutPlace returns st without owner's place.
func (st permitState) withoutPlace(owner string) permitState {
	if i := st.place(owner); i >= 0 {
		st.line = slices.Delete(slices.Clone(st.line), i, i+1)
	}
	return st
}

// setShape gives an idle name the shape req asks for.
func (st *permitState) setShape(req driver.Request) {
	st.shape, st.limit = driver.Write, 0
	if req.Kind == driver.Semaphore {
		st.shape, st.limit = driver.Semaphore, req.Limit
	}
}

// soonest is the time from now until the earliest permit's expiry, 0 when
// there is none.
func (st permitState) soonest(now int64) int64 {
	var d int64
	for _, h := range st.holders {
		if left := h.expires - now; left > 0 && (d == 0 || left < d) {
			d = left
		}
	}
	return d
}
