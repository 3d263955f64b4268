package driver

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// The errors a Backend returns, matched with errors.Is. Package lock
// re-exports those its users match (lock.ErrHeld is ErrHeld, and so on).
var (
	// ErrHeld means the caller was not admitted: another owner holds the
	// lock, the semaphore is full, or others are ahead in line.
	ErrHeld = errors.New("lock: held by another owner")

	// ErrNotHeld means the owner does not hold the lease (any more): it
	// expired, was released, or was taken by someone else.
	ErrNotHeld = errors.New("lock: not held")

	// ErrShapeMismatch means a permit name is in use as another shape than
	// the request asked for: a semaphore asked for as a read-write lock or
	// the other way round, a semaphore of another Limit, or an owner
	// holding a permit of another kind. Nothing was changed.
	ErrShapeMismatch = errors.New("lock: the name is in use as another lock shape")

	// ErrUnsupported means the backend cannot serve this request's shape at
	// all. Nothing was changed. No backend shipped with fencekit returns it.
	ErrUnsupported = errors.New("lock: the backend does not support this lock shape")

	// ErrNotAtomic means the backend cannot take this set of names in one
	// step; nothing was changed, and the Client takes them one by one.
	ErrNotAtomic = errors.New("lock: this set of names cannot be acquired in one step")

	// ErrInvalid is fence.ErrInvalid: bad input, refused before anything
	// was sent. The refusals of Validate and of package lock match it but
	// read "lock: invalid argument: ..." (see Invalid).
	ErrInvalid = fence.ErrInvalid
)

// Invalid returns an error matching ErrInvalid (so fence.ErrInvalid and
// lock.ErrInvalid) that says what was wrong. Its text is "lock: invalid
// argument: " and the detail: the sentinel is shared with package fence,
// whose own text ("fence: invalid argument") names the Store side, so a
// refused lock call would otherwise read as a Store's error. Validate and
// package lock refuse bad input with it; a backend may as well.
func Invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// invalidError is Invalid's error: it unwraps to ErrInvalid without
// printing its text.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return "lock: invalid argument: " + e.msg }

func (e *invalidError) Unwrap() error { return ErrInvalid }

// HeldError is the error Acquire returns when the caller was not admitted.
// It matches ErrHeld. Its message names the shape that refused the caller:
//
//	lock "job" is held by another owner; it frees in 19.3s
//	semaphore "jobs": all 3 permits are held; the first frees in 19.3s
//	read-write lock "prices": a writer holds it or waits for it; ...
type HeldError struct {
	// Name is the busy name (for a set, the first busy one found).
	Name string
	// TTL is the remaining time to live of the holder whose expiry would
	// let the caller in, or 0 when unknown.
	TTL time.Duration
	// Kind is the kind the refused request asked for (Request.Kind); 0
	// reads as Exclusive, unless Permits is set.
	Kind Kind
	// Permits, when above zero, says the name is a semaphore of that many
	// permits, all taken.
	//
	// A lock.Client fills Kind (and Permits, for a semaphore) in from its
	// request when a backend returns a *HeldError with them zero, so a
	// backend need not set them.
	Permits int
}

func (e *HeldError) Error() string {
	var what, frees string
	switch {
	case e.Kind == Semaphore || e.Kind == 0 && e.Permits > 0:
		all := "all permits are held"
		if e.Permits > 0 {
			all = fmt.Sprintf("all %d permits are held", e.Permits)
		}
		what, frees = fmt.Sprintf("semaphore %q: %s", e.Name, all), "the first frees"
	case e.Kind == Read:
		what, frees = fmt.Sprintf("read-write lock %q: a writer holds it or waits for it", e.Name), "the first holder frees"
	case e.Kind == Write:
		what, frees = fmt.Sprintf("read-write lock %q: others hold it or wait for it", e.Name), "the first holder frees"
	default:
		what, frees = fmt.Sprintf("lock %q is held by another owner", e.Name), "it frees"
	}
	if e.TTL > 0 {
		return fmt.Sprintf("%s; %s in %v", what, frees, roundTTL(e.TTL))
	}
	return what
}

// roundTTL rounds a remaining TTL for a message: to a tenth of a second
// from a second up, to the millisecond below.
func roundTTL(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// NotHeld returns an error matching ErrNotHeld that names name.
func NotHeld(name string) error { return fmt.Errorf("%w: %q", ErrNotHeld, name) }

// ShapeMismatch returns the error Acquire gives when req does not fit the
// shape of the name's live permits (have, limit): it matches
// ErrShapeMismatch and says what each side is.
func ShapeMismatch(name string, have Kind, limit int, req Request) error {
	return fmt.Errorf("%w: %q is %s; asked for %s", ErrShapeMismatch, name, shapeText(have, limit), shapeText(req.Kind, req.Limit))
}

func shapeText(k Kind, limit int) string {
	if k == Semaphore {
		return fmt.Sprintf("a semaphore of %d permits", limit)
	}
	return "a read-write lock"
}

// SameShape reports whether a permit name whose live permits have shape
// have and limit can grant req: the same semaphore limit, or both kinds of a
// read-write lock.
func SameShape(have Kind, limit int, req Request) bool {
	if have == Semaphore || req.Kind == Semaphore {
		return have == req.Kind && limit == req.Limit
	}
	return true
}
