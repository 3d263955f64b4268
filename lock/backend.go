package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Backend is where leases live. A Client drives a Backend; applications
// normally use the Client and never call a Backend directly.
//
// Implementations must meet these obligations, which the package
// [github.com/fencekit/fencekit/lock/locktest] checks:
//
//   - Acquire(name, owner, ttl): if the lock is free or its lease has
//     expired, it must take it for owner for ttl and mint a token greater
//     than every token ever issued for name, in the same atomic step. If
//     owner already holds it, it must extend the lease to ttl and return the
//     same token, so that an acquire retried after a lost reply does not lock
//     its own caller out. Otherwise it must return an error for which
//     errors.Is(err, ErrHeld) is true; a *HeldError carries the remaining
//     TTL when it is known.
//   - Extend(name, owner, ttl): only while owner holds the lock; it must
//     never re-create a lease that has expired or been released. Otherwise it
//     must return an error matching ErrNotHeld and leave the current holder
//     untouched.
//   - Release(name, owner): compare-and-delete. When owner does not hold the
//     lock it must return an error matching ErrNotHeld and leave the current
//     holder untouched. Releasing must not lower the next token.
//   - Inspect(name): the holder, its token and the remaining TTL; Held is
//     false when the lock is free.
//   - Holder metadata (optional): a backend that stores it takes it from
//     Acquire's context (MetadataFromContext; ValidateAcquire refuses bad
//     metadata with ErrInvalid), replaces it on every Acquire that takes or
//     renews the lease, same owner included, keeps it on Extend, drops it on
//     Release and expiry, and reports it in Info.Metadata.
//     locktest.RunMetadata checks this. A backend that stores none reports
//     "" and meets the rest of the contract unchanged.
//   - Bad input (an empty or malformed name or owner, ttl below MinTTL)
//     must be refused with an error matching ErrInvalid before anything is
//     sent; ValidateArgs and ValidateName check it.
//   - A failure that a retry may cure (the server unreachable, busy,
//     loading, failing over, a serialization conflict) must be an error for
//     which Retryable is true: a net.Error or an error wrapped with
//     Transient. Any other error is permanent: Client.Acquire returns it at
//     once instead of retrying, and a permanent error from Extend loses the
//     lease at once.
//   - A backend that may block past its context's deadline is tolerated:
//     the Client stops waiting for Extend and Release at the deadline and
//     treats the outcome as unknown. Acquire is waited for, so that giving
//     up never races an attempt still in flight.
//   - Every method must honour its context.
//
// Types that satisfy Backend in this module: *memory.Backend,
// *redis.Backend and *postgres.Backend.
type Backend interface {
	// Acquire takes name for owner for ttl and returns a new token, or
	// extends owner's own lease and returns its token.
	Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error)
	// Extend renews owner's lease on name to ttl from now.
	Extend(ctx context.Context, name, owner string, ttl time.Duration) error
	// Release frees name if owner holds it.
	Release(ctx context.Context, name, owner string) error
	// Inspect reports the lease on name, if any.
	Inspect(ctx context.Context, name string) (Info, error)
}

// Info describes a lock as its Backend sees it.
type Info struct {
	Name  string
	Held  bool          // whether a lease is live
	Owner string        // the holder's owner value; empty when free
	Token fence.Token   // the holder's token; 0 when free
	TTL   time.Duration // the holder's remaining time to live; 0 when free
	// Metadata is what the holder's Client attached (Options.Metadata,
	// ContextWithMetadata) when it acquired the lease: which process holds
	// the lock. "" when free, when none was attached, or when the backend
	// keeps no metadata.
	Metadata string
}

// MinTTL is the shortest lease a Backend accepts. Shorter TTLs are refused
// with ErrInvalid: they cannot outlive one round trip.
const MinTTL = time.Millisecond

// ValidateArgs checks the arguments common to Acquire and Extend. Backends
// call it first, so that every adapter refuses the same inputs the same way.
func ValidateArgs(name, owner string, ttl time.Duration) error {
	if err := ValidateName(name, owner); err != nil {
		return err
	}
	if ttl < MinTTL {
		return fence.Invalid("ttl %v is below the minimum %v", ttl, MinTTL)
	}
	return nil
}

// ValidateName checks a lock name and an owner value, as Release needs. Both
// obey the rule of fence.ValidateKey (non-empty UTF-8 of at most
// fence.MaxKeyLen bytes, no NUL), so that every adapter stores any owner that
// any other adapter accepts.
func ValidateName(name, owner string) error {
	if name == "" {
		return fence.Invalid("empty lock name")
	}
	if err := fence.ValidateKey(name); err != nil {
		return fmt.Errorf("lock name: %w", err)
	}
	if owner == "" {
		return fence.Invalid("empty owner")
	}
	if err := fence.ValidateKey(owner); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	return nil
}
