package lock

import "fmt"

// permanent is the error Acquire returns when an attempt failed in a way
// that retrying cannot cure.
func permanent(name string, attempts int, err error) error {
	return fmt.Errorf("%w: %q after %d attempt(s), not retried: %w", ErrNotAcquired, name, attempts, err)
}
