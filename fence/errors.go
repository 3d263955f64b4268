package fence

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; the concrete errors carry more
// detail.
var (
	// ErrStale means a write carried a token below the key's fence: a newer
	// holder has written or advanced the key since. Nothing was changed.
	ErrStale = errors.New("fence: stale token")

	// ErrNotFound means the key holds no value: it was never written, was
	// deleted, or was only advanced.
	ErrNotFound = errors.New("fence: key not found")

	// ErrInvalid means an argument was refused before anything was sent or
	// written: an empty key or lock name, a token outside 1..MaxToken, a TTL
	// below the minimum, a nil store or backend.
	ErrInvalid = errors.New("fence: invalid argument")
)

// StaleError is the error a Store returns when it refuses a write. It matches
// ErrStale.
type StaleError struct {
	Key   string // the key written
	Token Token  // the token the writer offered
	Fence Token  // the key's fence when the write was refused
}

// Error describes the refusal.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d for key %q: fence is %d", e.Token, e.Key, e.Fence)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Stale returns a *StaleError for key, the offered token and the current fence.
func Stale(key string, offered, current Token) error {
	return &StaleError{Key: key, Token: offered, Fence: current}
}

// Invalid returns an error matching ErrInvalid that says what was wrong.
// Adapters use it so that every refusal of bad input reads alike.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
