package lock

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrHeld means another owner holds the lock.
	ErrHeld = errors.New("lock: held by another owner")

	// ErrNotHeld means the caller's owner does not hold the lock (any more):
	// it expired, was released, or was taken by someone else.
	ErrNotHeld = errors.New("lock: not held")

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
	// no longer held, or a renewal failed with an error that Retryable
	// says will not heal.
	ErrLost = errors.New("lock: lease lost")

	// ErrReleased ends a lease's context when its holder released it.
	ErrReleased = errors.New("lock: lease released")

	// ErrInvalid is fence.ErrInvalid: bad input, refused before anything
	// was sent.
	ErrInvalid = fence.ErrInvalid
)

// HeldError is the error a Backend returns when another owner holds the lock.
// It matches ErrHeld.
type HeldError struct {
	Name string
	// TTL is the holder's remaining time to live, or 0 when unknown.
	TTL time.Duration
}

// Error describes the refusal.
func (e *HeldError) Error() string {
	if e.TTL > 0 {
		return fmt.Sprintf("lock: %q is held by another owner for %v more", e.Name, e.TTL)
	}
	return fmt.Sprintf("lock: %q is held by another owner", e.Name)
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }
