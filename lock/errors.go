package lock

import (
	"errors"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrHeld means another owner holds the lock.
	ErrHeld = driver.ErrHeld

	// ErrNotHeld means the caller's owner does not hold the lock (any more):
	// it expired, was released, or was taken by someone else.
	ErrNotHeld = driver.ErrNotHeld

	// ErrNotAcquired means Client.Acquire or TryAcquire gave up. It is
	// joined with the last attempt's error and, when the context ended,
	// with ctx.Err().
	ErrNotAcquired = errors.New("lock: not acquired")

	// ErrUnreachable means Client.Acquire (or Do, or Campaign) gave up
	// because no attempt got an answer about the lock from the backend for
	// Options.MaxUnreachable. It comes joined with ErrNotAcquired and the
	// last attempt's error (a refused connection, say).
	ErrUnreachable = errors.New("lock: backend unreachable")

	// ErrLost ends a lease's context when the lease is lost: its local
	// deadline passed without a successful renewal, the backend said it is
	// no longer held, or a renewal failed with an error that a retry
	// cannot cure.
	ErrLost = errors.New("lock: lease lost")

	// ErrReleased ends a lease's context when its holder released it.
	ErrReleased = errors.New("lock: lease released")

	// ErrInvalid is fence.ErrInvalid: bad input, refused before anything
	// was sent.
	ErrInvalid = fence.ErrInvalid

	// ErrShapeMismatch means a name is in use as another shape than the
	// call asked for: a semaphore asked for as a read-write lock or the
	// other way round, or a semaphore asked for with another number of
	// permits. Nothing was changed.
	ErrShapeMismatch = driver.ErrShapeMismatch

	// ErrUnsupported means the backend cannot serve the lock shape a call
	// asked for. Nothing was changed. No backend shipped with fencekit
	// returns it; a third-party one may.
	ErrUnsupported = driver.ErrUnsupported
)
