package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// PermitBackend is an optional capability of a Backend: names with more
// than one holder at a time, the semaphores (Client.Semaphore) and
// read-write locks (Client.RWLock). A permit is a lease on such a name: it
// has an owner value, a fencing token, a TTL and a keep-alive, as any lease.
//
// Permit names live apart from the Backend's single-holder locks: a
// semaphore called "x" and a lock called "x" neither see nor block each
// other, and their tokens are counted apart.
//
// A permit name has a shape, set by the acquire that finds it idle (no live
// permit, no live place in line) and kept for as long as it is not: a
// semaphore of Limit permits, or a read-write lock. Its token counter and its
// last writer (see below) outlive every shape and are never lowered.
//
// Implementations must meet these obligations, which the package
// [github.com/fencekit/fencekit/lock/locktest] checks (RunPermits):
//
//   - AcquirePermit(name, owner, req), in one atomic step: it must first drop
//     every permit and every place in line whose expiry has passed. When
//     the name has a live permit or place and req asks for another shape (a
//     read-write lock of a semaphore, or a semaphore of another Limit), it
//     must change nothing and return an error matching ErrShapeMismatch.
//     When owner holds a live permit of req's kind, it must extend it to
//     req.TTL from now, remove owner's place, and return the same Permit
//     (same Token, same PriorWriter), so that a retried acquire does not
//     lock its own caller out; a permit of another kind is ErrShapeMismatch
//     and changes nothing. Otherwise owner is admitted, with "ahead" the
//     live places that arrived before owner's (every live place when owner
//     has none):
//     SemaphorePermit when live permits + places ahead < Limit;
//     WritePermit when no permit is live and no place is ahead;
//     ReadPermit when no write permit is live and no write place is ahead.
//     Admitted, it must mint a token greater than every token ever issued
//     for name, whatever the kind, store the permit with an expiry of
//     req.TTL from now, remove owner's place, and return the token with
//     PriorWriter, the token of the newest write permit ever granted on
//     name before this one (0 if none); a WritePermit's token becomes the
//     name's last writer. Not admitted, when req.Place > 0 it must keep
//     owner's place, or add one at the tail when owner has none (never two
//     places for one owner), set it to expire req.Place from now, and
//     return an error matching ErrHeld; when req.Place is 0 it must change
//     nothing and return an error matching ErrHeld. A *HeldError carries the
//     time until the earliest live permit expires, when known.
//   - Nobody jumps the line: an acquire without a place (Place 0, as
//     TryAcquire sends) counts every live place as ahead of it, so it never
//     takes a permit that a waiter is owed, and a stream of readers cannot
//     starve a writer that waits.
//   - ExtendPermit(name, owner, ttl): only while owner holds a live permit
//     on name; it must never re-create one that expired or was released.
//     Otherwise it must return an error matching ErrNotHeld and change
//     nothing.
//   - ReleasePermit(name, owner): compare-and-delete of owner's permit; an
//     error matching ErrNotHeld when owner holds none. It must not lower the
//     token counter, and it must wake the waiters in line that it lets in
//     (waking every waiter of name is allowed).
//   - AwaitPermit(name, owner, max) blocks until owner is woken, max has
//     passed or ctx ends, as QueueBackend.AwaitTurn: nil in the first two
//     cases, an error matching ctx.Err() in the third; it may return early,
//     and a wake-up sent after owner's AcquirePermit returned must not be
//     lost. An expired permit or place that lets a waiter in may be left to
//     the waiter's next renewal, which comes within a third of its place TTL.
//   - LeavePermitLine(name, owner) removes owner's place; nil when owner has
//     none.
//   - InspectPermits(name) reports the name's shape, its live permits, how
//     many places are live, and its last writer.
//   - Bad input is refused with ErrInvalid before anything is sent
//     (ValidatePermit; ValidateName for the other methods). Every method
//     honours its context, and failures a retry may cure are Retryable, as
//     for Backend.
//
// Types that satisfy PermitBackend in this module: *memory.Backend,
// *redis.Backend, *postgres.Backend and *sqldb.Backend; in a module of its
// own, the etcd adapter's *etcd.Backend.
type PermitBackend interface {
	// AcquirePermit takes a permit on name for owner, or keeps owner's
	// place in line when req.Place > 0.
	AcquirePermit(ctx context.Context, name, owner string, req PermitRequest) (Permit, error)
	// ExtendPermit renews owner's permit on name to ttl from now.
	ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error
	// ReleasePermit gives up owner's permit on name.
	ReleasePermit(ctx context.Context, name, owner string) error
	// AwaitPermit waits until owner is woken, at most max.
	AwaitPermit(ctx context.Context, name, owner string, max time.Duration) error
	// LeavePermitLine gives up owner's place in name's line.
	LeavePermitLine(ctx context.Context, name, owner string) error
	// InspectPermits reports the permits on name.
	InspectPermits(ctx context.Context, name string) (Permits, error)
}

// PermitKind is what a permit lets its holder do.
type PermitKind uint8

const (
	// SemaphorePermit is one of a semaphore's Limit permits.
	SemaphorePermit PermitKind = iota + 1
	// ReadPermit is a read-write lock's shared permit: any number of
	// readers hold one together, and none while a writer does.
	ReadPermit
	// WritePermit is a read-write lock's exclusive permit.
	WritePermit
)

// String names the kind as the docs and fencectl do.
func (k PermitKind) String() string {
	switch k {
	case SemaphorePermit:
		return "semaphore"
	case ReadPermit:
		return "read"
	case WritePermit:
		return "write"
	}
	return fmt.Sprintf("PermitKind(%d)", uint8(k))
}

// PermitRequest is what AcquirePermit is asked for.
type PermitRequest struct {
	Kind PermitKind
	// Limit is a semaphore's number of permits, 1 to MaxPermits; 0 for
	// the kinds of a read-write lock.
	Limit int
	// TTL is the permit's time to live, at least MinTTL.
	TTL time.Duration
	// Place, when above zero, keeps the caller's place in line for that
	// long when it is not admitted (at least MinPlaceTTL); 0 means do not
	// wait in line.
	Place time.Duration
}

// Permit is what AcquirePermit grants.
type Permit struct {
	// Token is the permit's fencing token: greater than every token issued
	// for the name before it.
	Token fence.Token
	// PriorWriter is the token of the newest write permit granted on the
	// name before this permit, 0 if none.
	PriorWriter fence.Token
}

// Permits describes a permit name as its backend sees it.
type Permits struct {
	Name string
	// Kind is SemaphorePermit for a semaphore, WritePermit for a
	// read-write lock, and 0 when the name is idle (no permit, no place).
	Kind  PermitKind
	Limit int // a semaphore's number of permits; 0 otherwise
	// Holders are the live permits, in no particular order.
	Holders []PermitHolder
	// Waiting is how many live places are in line.
	Waiting int
	// LastWriter is the token of the newest write permit ever granted.
	LastWriter fence.Token
}

// PermitHolder is one live permit.
type PermitHolder struct {
	Owner string
	Kind  PermitKind
	Token fence.Token
	TTL   time.Duration // remaining time to live
}

// MaxPermits is the most permits a semaphore has.
const MaxPermits = 1 << 16

// ErrShapeMismatch means a permit name is in use as another shape than the
// call asked for: a semaphore asked for as a read-write lock or the other way
// round, a semaphore asked for with another number of permits, or an owner
// holding a permit of another kind. Nothing was changed.
var ErrShapeMismatch = errors.New("lock: the name is in use as another lock shape")

// ErrUnsupported means the Client's backend lacks the capability a call
// needs (a semaphore or read-write lock over a Backend that is not a
// PermitBackend). Nothing was sent.
var ErrUnsupported = errors.New("lock: the backend does not support this lock shape")

// ValidatePermit checks AcquirePermit's arguments, as ValidateArgs does for
// Acquire: the name and owner, the kind, a Limit in range for a semaphore
// and 0 otherwise, the TTL, and a Place of 0 or at least MinPlaceTTL.
func ValidatePermit(name, owner string, req PermitRequest) error {
	if err := ValidateArgs(name, owner, req.TTL); err != nil {
		return err
	}
	switch req.Kind {
	case SemaphorePermit:
		if req.Limit < 1 || req.Limit > MaxPermits {
			return fence.Invalid("semaphore limit %d is outside 1 to %d", req.Limit, MaxPermits)
		}
	case ReadPermit, WritePermit:
		if req.Limit != 0 {
			return fence.Invalid("a %v permit takes no limit, got %d", req.Kind, req.Limit)
		}
	default:
		return fence.Invalid("unknown permit kind %d", req.Kind)
	}
	if req.Place != 0 && req.Place < MinPlaceTTL {
		return fence.Invalid("place ttl %v is below the minimum %v", req.Place, MinPlaceTTL)
	}
	return nil
}

// ShapeMismatch returns the error a PermitBackend gives when req does not
// fit the shape of name's live permits (have, limit): it matches
// ErrShapeMismatch and says what each side is.
func ShapeMismatch(name string, have PermitKind, limit int, req PermitRequest) error {
	return fmt.Errorf("%w: %q is %s; asked for %s", ErrShapeMismatch, name, shapeText(have, limit), shapeText(req.Kind, req.Limit))
}

func shapeText(k PermitKind, limit int) string {
	if k == SemaphorePermit {
		return fmt.Sprintf("a semaphore of %d permits", limit)
	}
	return "a read-write lock"
}

// SameShape reports whether a name whose live permits have kind have and
// limit can grant req: the same semaphore limit, or both of a read-write
// lock.
func SameShape(have PermitKind, limit int, req PermitRequest) bool {
	if have == SemaphorePermit || req.Kind == SemaphorePermit {
		return have == req.Kind && limit == req.Limit
	}
	return true
}
