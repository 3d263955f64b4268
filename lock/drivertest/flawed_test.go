package drivertest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// flaws are realistic bugs of lock backends, one per field. A flawed
// backend with none set is correct: a map under a mutex.
type flaws struct {
	// Tokens.
	resetOnRelease   bool // the counter is deleted with the lease
	resetOnExpiry    bool // the counter lives in the lease record and expires with it
	releaseLowers    bool // a release "gives back" the last token
	mintWhileWaiting bool // a token is minted at an owner's first attempt, and kept while it waits
	reacquireNewTok  bool // a same-owner re-acquire mints a new token
	reacquireNoRenew bool // a same-owner re-acquire keeps the old expiry
	nonAtomicAcquire bool // check and set in two steps, other goroutines run between
	// The lease record outlives the lease, and the same-owner branch of
	// Acquire matches it: an owner that comes back gets its old token.
	reuseAfterRelease bool // Release marks the record ended
	reuseAfterExpiry  bool // expiry marks the record ended

	// Extend, release, expiry.
	extendAddsToOld     bool // Extend adds ttl to the old expiry
	extendNeverShorts   bool // Extend keeps the later of the old and new expiry
	extendRecreates     bool // Extend re-creates an expired lease
	extendAnyOwner      bool // Extend does not compare the owner
	extendOtherMovesTTL bool // another owner's Extend moves the expiry, then fails
	extendPlainError    bool // Extend's refusal does not match driver.ErrNotHeld
	releaseAnyOwner     bool // Release does not compare the owner
	releaseKeepsHeld    bool // Release reports success and leaves the lease
	noExclusion         bool // Acquire always succeeds, replacing the holder
	coarseClock         bool // expiry computed from a clock that ticks every 100ms
	ttlSeconds          bool // ttl sent as whole seconds (EXPIRE): sub-second TTLs become 0
	ttlTenths           bool // ttl rounded down to 100ms

	// Inspect.
	inspectGrantedTTL bool // Inspect reports the TTL the lease was granted with
	inspectFreeStale  bool // Inspect of a released lock still shows its owner and token
	inspectNoExpiry   bool // Inspect ignores expiry
	heldNegativeTTL   bool // HeldError.TTL is negative
	heldGrantedTTL    bool // HeldError.TTL is the holder's granted TTL
	heldPlainError    bool // the refusal does not match driver.ErrHeld
	heldBare          bool // the refusal is a bare driver.ErrHeld, naming no lock

	// Input and context. The Client refuses bad input before the backend
	// sees it, so the flaws that accept bad input go unnoticed, as they
	// may (TestBackendsNeedNotCheckInput); a backend's own limit that
	// refuses valid input (shortNames) does not.
	acceptEmptyOwner bool // an empty owner is accepted
	acceptZeroTTL    bool // ttl is not checked
	nameEmptyOnly    bool // names are only checked for emptiness
	inspectNoCheck   bool // Inspect does not validate the name
	releaseNoCheck   bool // Release does not validate its input
	shortNames       bool // names longer than 255 bytes are refused
	ignoreContext    bool // no method looks at its context
	ctxAcquireOnly   bool // only Acquire looks at its context
	ownerPrefix      bool // owners compared by prefix
	ownerFold        bool // owners compared case-insensitively
	nameFold         bool // names case-folded
	nameTrim         bool // names trimmed of spaces

	// Legal variations.
	sharedCounter bool // one counter for every name
	gaps          bool // tokens skip a random number of values
	wrapErrors    bool // every error wrapped with the backend's own message
	heldNoTTL     bool // refusals without a place carry no TTL (0: unknown)
}

type flawedLease struct {
	owner    string
	token    fence.Token
	granted  time.Duration
	expires  time.Time
	counter  fence.Token // resetOnExpiry: the counter kept in the lease record
	metadata string
}

// flawedPlace is a waiter's place in a lock's line.
type flawedPlace struct {
	owner   string
	expires time.Time
	wake    chan struct{}
}

// flawed is a driver.Backend with the bugs in f. It keeps its locks itself,
// in maps under a mutex: a lock, a place in line, a resume; a set it answers
// with driver.ErrNotAtomic, so that the Client takes it one name at a time.
// Its permits are those of the memory backend it embeds, which overrides
// nothing else: the flaws are all in its locks.
type flawed struct {
	driver.Backend // memory, for the permits

	f        flaws
	mu       sync.Mutex
	leases   map[string]*flawedLease
	freed    map[string]*flawedLease // inspectFreeStale: the last released lease
	last     map[string]fence.Token
	reserved map[string]fence.Token  // mintWhileWaiting: per owner
	ended    map[string]*flawedLease // reuseAfter*: the ended lease record
	lines    map[string][]*flawedPlace
}

func newFlawed(f flaws) *flawed {
	return &flawed{Backend: memory.NewBackend(), f: f, leases: map[string]*flawedLease{}, freed: map[string]*flawedLease{},
		last: map[string]fence.Token{}, reserved: map[string]fence.Token{}, ended: map[string]*flawedLease{},
		lines: map[string][]*flawedPlace{}}
}

var _ driver.Backend = (*flawed)(nil)

func (b *flawed) wrap(err error) error {
	if err != nil && b.f.wrapErrors {
		return fmt.Errorf("flawed backend: %w", err)
	}
	return err
}

func (b *flawed) name(n string) string {
	if b.f.nameFold {
		n = strings.ToLower(n)
	}
	if b.f.nameTrim {
		n = strings.TrimSpace(n)
	}
	return n
}

func (b *flawed) sameOwner(held, o string) bool {
	switch {
	case b.f.ownerPrefix:
		return strings.HasPrefix(held, o) || strings.HasPrefix(o, held)
	case b.f.ownerFold:
		return strings.EqualFold(held, o)
	}
	return held == o
}

// validName and validate are the backend's own checks of its input, which
// the contract lets it skip (the Client checked it): the correct flawed
// backend makes them anyway, the input flaws weaken them, and shortNames
// adds a limit of its own.
func (b *flawed) validName(n string) error {
	if b.f.nameEmptyOnly {
		if n == "" {
			return fence.Invalid("empty lock name")
		}
		return nil
	}
	if b.f.shortNames && len(n) > 255 {
		return fence.Invalid("lock name longer than 255 bytes")
	}
	return fence.ValidateKey(n)
}

func (b *flawed) validate(n, o string, ttl time.Duration, checkTTL bool) error {
	if err := b.validName(n); err != nil {
		return err
	}
	if o == "" && !b.f.acceptEmptyOwner {
		return fence.Invalid("empty owner")
	}
	if o != "" && !b.f.nameEmptyOnly && (!utf8.ValidString(o) || strings.IndexByte(o, 0) >= 0 || len(o) > fence.MaxKeyLen) {
		return fence.Invalid("bad owner")
	}
	if checkTTL && ttl < driver.MinTTL && !b.f.acceptZeroTTL {
		return fence.Invalid("ttl %v too short", ttl)
	}
	return nil
}

func (b *flawed) ctxErr(ctx context.Context, acquire bool) error {
	if b.f.ignoreContext || (b.f.ctxAcquireOnly && !acquire) {
		return nil
	}
	return ctx.Err()
}

// now is the clock expiries are computed from.
func (b *flawed) now() time.Time {
	if b.f.coarseClock {
		return time.Now().Truncate(100 * time.Millisecond)
	}
	return time.Now()
}

func (b *flawed) lifetime(ttl time.Duration) time.Duration {
	switch {
	case b.f.ttlSeconds:
		return ttl.Truncate(time.Second)
	case b.f.ttlTenths:
		return ttl.Truncate(100 * time.Millisecond)
	}
	return ttl
}

// live returns the live lease on n. The caller holds b.mu.
func (b *flawed) live(n string) *flawedLease {
	l := b.leases[n]
	if l != nil && !time.Now().Before(l.expires) {
		delete(b.leases, n)
		if b.f.reuseAfterExpiry {
			b.ended[n] = l
		}
		if b.f.resetOnExpiry {
			b.last[n] = 0
		}
		return nil
	}
	return l
}

func (b *flawed) mint(n string) fence.Token {
	key := n
	if b.f.sharedCounter {
		key = ""
	}
	step := fence.Token(1)
	if b.f.gaps {
		step += fence.Token(rand.IntN(1000))
	}
	b.last[key] += step
	return b.last[key]
}

// held is the refusal of an acquire of n held by l: with l's remaining TTL
// when ttl is set (the caller is not behind others in line). inLine says
// the caller keeps a place in line.
func (b *flawed) held(n string, l *flawedLease, ttl, inLine bool) error {
	switch {
	case b.f.heldPlainError:
		return errors.New("flawed backend: lock is taken")
	case b.f.heldBare:
		return b.wrap(driver.ErrHeld)
	case l == nil || !ttl || (b.f.heldNoTTL && !inLine):
		return b.wrap(&driver.HeldError{Name: n})
	case b.f.heldNegativeTTL:
		return b.wrap(&driver.HeldError{Name: n, TTL: -time.Until(l.expires)})
	case b.f.heldGrantedTTL:
		return b.wrap(&driver.HeldError{Name: n, TTL: l.granted})
	}
	return b.wrap(&driver.HeldError{Name: n, TTL: time.Until(l.expires)})
}

// line returns n's live places, first in line first, dropping those whose
// time ran out. The caller holds b.mu.
func (b *flawed) line(n string) []*flawedPlace {
	q := b.lines[n]
	kept := slices.DeleteFunc(q, func(p *flawedPlace) bool { return !time.Now().Before(p.expires) })
	b.lines[n] = kept
	if len(kept) == 0 {
		delete(b.lines, n)
	}
	return kept
}

func (b *flawed) placeOf(n, owner string) int {
	return slices.IndexFunc(b.lines[n], func(p *flawedPlace) bool { return p.owner == owner })
}

// leaveLine removes owner's place in n's line, if any. The caller holds
// b.mu.
func (b *flawed) leaveLine(n, owner string) {
	if at := b.placeOf(n, owner); at >= 0 {
		b.lines[n] = slices.Delete(b.lines[n], at, at+1)
	}
}

// wakeFirst wakes the first in n's line when the lock is free. The caller
// holds b.mu.
func (b *flawed) wakeFirst(n string) {
	if q := b.line(n); len(q) > 0 && b.live(n) == nil {
		wake.Post(q[0].wake)
	}
}

// Acquire serves every lock request itself and passes permits on.
func (b *flawed) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	switch {
	case req.Kind.Permit():
		return b.Backend.Acquire(ctx, req)
	case req.Names != nil:
		if err := b.ctxErr(ctx, true); err != nil {
			return driver.Grant{}, b.wrap(err)
		}
		return driver.Grant{}, b.wrap(fmt.Errorf("%w: a set of %d names", driver.ErrNotAtomic, len(req.Names)))
	case req.Resume:
		tok, err := b.resume(ctx, req.Name, req.Owner, req.TTL)
		return driver.Grant{Token: tok}, err
	}
	tok, err := b.acquire(ctx, req)
	return driver.Grant{Token: tok}, err
}

func (b *flawed) acquire(ctx context.Context, req driver.Request) (fence.Token, error) {
	name, owner, ttl := req.Name, req.Owner, req.TTL
	if err := b.validate(name, owner, ttl, true); err != nil {
		return 0, b.wrap(err)
	}
	if err := b.ctxErr(ctx, true); err != nil {
		return 0, b.wrap(err)
	}
	n := b.name(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.f.mintWhileWaiting && b.reserved[owner] == 0 {
		b.reserved[owner] = b.mint(n)
	}
	l := b.live(n)
	q := b.line(n)
	at := b.placeOf(n, owner)
	if l != nil && !b.f.noExclusion {
		if !b.sameOwner(l.owner, owner) {
			if req.Place > 0 {
				at = b.keepPlace(n, owner, req.Place)
			}
			return 0, b.held(n, l, at <= 0, req.Place > 0)
		}
		if !b.f.reacquireNoRenew {
			l.expires, l.granted = b.now().Add(b.lifetime(ttl)), ttl
		}
		if b.f.reacquireNewTok {
			l.token = b.mint(n)
		}
		l.metadata = req.Metadata
		b.leaveLine(n, owner)
		return l.token, nil
	}
	if req.Place > 0 && len(q) > 0 && at != 0 && !b.f.noExclusion {
		// Others are ahead in line: keep a place behind them.
		b.keepPlace(n, owner, req.Place)
		b.wakeFirst(n)
		return 0, b.held(n, nil, false, true)
	}
	if b.f.nonAtomicAcquire {
		// The check above and the write below are two round trips.
		b.mu.Unlock()
		runtime.Gosched()
		b.mu.Lock()
	}
	b.leaveLine(n, owner)
	if e := b.ended[n]; e != nil && b.sameOwner(e.owner, owner) {
		// The ended record is taken for the owner's own live lease.
		b.leases[n] = &flawedLease{owner: owner, token: e.token, granted: ttl, expires: b.now().Add(b.lifetime(ttl)), metadata: req.Metadata}
		return e.token, nil
	}
	delete(b.ended, n)
	tok := b.reserved[owner]
	if !b.f.mintWhileWaiting {
		tok = b.mint(n)
	}
	b.leases[n] = &flawedLease{owner: owner, token: tok, granted: ttl, expires: b.now().Add(b.lifetime(ttl)), metadata: req.Metadata}
	return tok, nil
}

// keepPlace keeps owner's place in n's line for place, adding one at the
// tail when it has none, and returns its index. The caller holds b.mu.
func (b *flawed) keepPlace(n, owner string, place time.Duration) int {
	at := b.placeOf(n, owner)
	if at < 0 {
		at = len(b.lines[n])
		b.lines[n] = append(b.lines[n], &flawedPlace{owner: owner, wake: wake.NewBox()})
	}
	b.lines[n][at].expires = time.Now().Add(place)
	return at
}

// resume renews owner's live lease on name, keeping its token and
// metadata.
func (b *flawed) resume(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	if err := b.validate(name, owner, ttl, true); err != nil {
		return 0, b.wrap(err)
	}
	if err := b.ctxErr(ctx, true); err != nil {
		return 0, b.wrap(err)
	}
	n := b.name(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.live(n)
	if l == nil || !b.sameOwner(l.owner, owner) {
		return 0, b.wrap(driver.NotHeld(n))
	}
	l.expires, l.granted = b.now().Add(b.lifetime(ttl)), ttl
	return l.token, nil
}

func (b *flawed) notHeld(n string) error {
	if b.f.extendPlainError {
		return errors.New("flawed backend: cannot extend")
	}
	return b.wrap(fmt.Errorf("%w: %q", driver.ErrNotHeld, n))
}

func (b *flawed) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if c.Kind.Permit() {
		return b.Backend.Extend(ctx, c, ttl)
	}
	name, owner := c.Name, c.Owner
	if err := b.validate(name, owner, ttl, true); err != nil {
		return b.wrap(err)
	}
	if err := b.ctxErr(ctx, false); err != nil {
		return b.wrap(err)
	}
	n := b.name(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.live(n)
	if l == nil && b.f.extendRecreates {
		b.leases[n] = &flawedLease{owner: owner, token: b.last[n], granted: ttl, expires: b.now().Add(b.lifetime(ttl))}
		return nil
	}
	if l == nil {
		return b.notHeld(n)
	}
	if !b.sameOwner(l.owner, owner) && !b.f.extendAnyOwner {
		if b.f.extendOtherMovesTTL {
			l.expires = b.now().Add(b.lifetime(ttl))
		}
		return b.notHeld(n)
	}
	expires := b.now().Add(b.lifetime(ttl))
	switch {
	case b.f.extendAddsToOld:
		expires = l.expires.Add(b.lifetime(ttl))
	case b.f.extendNeverShorts && l.expires.After(expires):
		expires = l.expires
	}
	l.expires, l.granted = expires, ttl
	return nil
}

func (b *flawed) Release(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.Backend.Release(ctx, c)
	}
	name, owner := c.Name, c.Owner
	if !b.f.releaseNoCheck {
		if err := b.validate(name, owner, 0, false); err != nil {
			return b.wrap(err)
		}
	}
	if err := b.ctxErr(ctx, false); err != nil {
		return b.wrap(err)
	}
	n := b.name(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.live(n)
	if l == nil || (!b.sameOwner(l.owner, owner) && !b.f.releaseAnyOwner && !(b.f.releaseNoCheck && owner == "")) {
		return b.wrap(fmt.Errorf("%w: %q", driver.ErrNotHeld, n))
	}
	if b.f.releaseKeepsHeld {
		return nil
	}
	delete(b.leases, n)
	b.freed[n] = l
	if b.f.reuseAfterRelease {
		b.ended[n] = l
	}
	switch {
	case b.f.resetOnRelease:
		b.last[n] = 0
	case b.f.releaseLowers && b.last[n] == l.token:
		b.last[n]--
	}
	b.wakeFirst(n)
	return nil
}

// Await waits for a wake-up of owner's place in line, at most max.
func (b *flawed) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind.Permit() {
		return b.Backend.Await(ctx, c, max)
	}
	n := b.name(c.Name)
	b.mu.Lock()
	var box chan struct{}
	if at := b.placeOf(n, c.Owner); at >= 0 {
		box = b.lines[n][at].wake
	}
	b.mu.Unlock()
	if box == nil {
		return b.ctxErr(ctx, false)
	}
	return wake.Wait(ctx, box, max)
}

// Leave gives up owner's place in line, waking the next one.
func (b *flawed) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind.Permit() {
		return b.Backend.Leave(ctx, c)
	}
	if err := b.ctxErr(ctx, false); err != nil {
		return b.wrap(err)
	}
	n := b.name(c.Name)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaveLine(n, c.Owner)
	b.wakeFirst(n)
	return nil
}

func (b *flawed) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	if kind.Permit() {
		return b.Backend.Inspect(ctx, name, kind)
	}
	if !b.f.inspectNoCheck {
		if err := b.validName(name); err != nil {
			return driver.Info{}, b.wrap(err)
		}
	}
	if err := b.ctxErr(ctx, false); err != nil {
		return driver.Info{}, b.wrap(err)
	}
	n := b.name(name)
	b.mu.Lock()
	defer b.mu.Unlock()
	info := driver.Info{Name: name, Kind: driver.Exclusive, Waiting: len(b.line(n))}
	l := b.leases[n]
	if !b.f.inspectNoExpiry {
		l = b.live(n)
	}
	if l == nil {
		if f := b.freed[n]; b.f.inspectFreeStale && f != nil {
			info.Holders = []driver.Holder{{Owner: f.owner, Kind: driver.Exclusive, Token: f.token}}
		}
		return info, nil
	}
	ttl := time.Until(l.expires)
	if b.f.inspectGrantedTTL {
		ttl = l.granted
	}
	info.Holders = []driver.Holder{{Owner: l.owner, Kind: driver.Exclusive, Token: l.token, TTL: ttl, Metadata: l.metadata}}
	return info, nil
}
