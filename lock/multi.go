package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// MultiBackend is an optional capability of a Backend: acquiring a set of
// names in one atomic step (one round trip). Client.AcquireMulti,
// TryAcquireMulti and DoMulti use it when the backend has it; over any other
// Backend they take the names one by one in sorted order and roll back what
// they took when one is busy (see Client.TryAcquireMulti), which costs a
// round trip per name and lets others see a part of the set held for the
// length of one pass, but never while the caller waits.
//
// Implementations must meet these obligations, in addition to Backend's,
// which the package [github.com/fencekit/fencekit/lock/locktest] checks
// (MultiChecks):
//
//   - AcquireMulti(names, owner, ttl), in one atomic step: when every name
//     is free (or its lease expired) or held by owner, it must take each
//     free one for owner exactly as Acquire does (a token greater than
//     every token ever issued for that name), extend each one owner already
//     holds with its same token, and return the tokens in the order of
//     names. When any name is held by another owner it must change nothing
//     at all and return an error matching ErrHeld (a *HeldError naming that
//     name, with its holder's remaining TTL when known). No other caller
//     may ever see a part of the set taken by this call.
//   - When it cannot do this set in one step (Redis Cluster names in
//     different hash slots, say) it must change nothing and return an error
//     matching ErrNotAtomic; the Client then takes the names in order.
//   - Bad input (ValidateMulti) is refused with ErrInvalid before anything
//     is sent.
//
// Types that satisfy MultiBackend in this module: *memory.Backend,
// *redis.Backend, *postgres.Backend and *sqldb.Backend; in the module
// adapters/etcd, *etcd.Backend.
type MultiBackend interface {
	Backend
	// AcquireMulti takes every name for owner for ttl, or none of them.
	AcquireMulti(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error)
}

// ErrNotAtomic is what a MultiBackend returns when it cannot acquire a
// given set of names in one step; nothing was changed.
var ErrNotAtomic = errors.New("lock: this set of names cannot be acquired in one step")

// MaxMultiNames is the most names one multi-name acquire takes.
const MaxMultiNames = 64

// ValidateMulti checks the arguments of a multi-name acquire: between 1 and
// MaxMultiNames names, each valid (ValidateArgs) and none twice.
func ValidateMulti(names []string, owner string, ttl time.Duration) error {
	if len(names) == 0 {
		return fence.Invalid("empty set of lock names")
	}
	if len(names) > MaxMultiNames {
		return fence.Invalid("%d lock names in one set, above the maximum %d", len(names), MaxMultiNames)
	}
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if err := ValidateArgs(n, owner, ttl); err != nil {
			return err
		}
		if _, dup := seen[n]; dup {
			return fence.Invalid("lock name %q appears twice in one set", n)
		}
		seen[n] = struct{}{}
	}
	return nil
}

// sortedSet returns a sorted copy of names, checked as ValidateMulti does.
func sortedSet(names []string, owner string, ttl time.Duration) ([]string, error) {
	if err := ValidateMulti(names, owner, ttl); err != nil {
		return nil, err
	}
	set := slices.Clone(names)
	slices.Sort(set)
	return set, nil
}

// tryMulti makes one attempt at the whole set: in one step on a
// MultiBackend that can, otherwise in order. On failure the caller holds
// none of the names as far as it knows: the names taken in order were
// released again, and after a failure whose outcome is unknown every name
// was released (best effort, see abandonAll).
func (c *Client) tryMulti(ctx context.Context, set []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	if mb, ok := c.backend.(MultiBackend); ok {
		tokens, err := mb.AcquireMulti(ctx, set, owner, ttl)
		switch {
		case errors.Is(err, ErrNotAtomic):
			// Fall through to the names in order.
		case err == nil && len(tokens) != len(set):
			c.abandonAll(ctx, set, owner, ttl)
			return nil, fmt.Errorf("lock: AcquireMulti returned %d tokens for %d names", len(tokens), len(set))
		case err != nil && !errors.Is(err, ErrHeld) && !errors.Is(err, ErrInvalid):
			c.abandonAll(ctx, set, owner, ttl)
			return nil, err
		default:
			return tokens, err
		}
	}
	return c.acquireInOrder(ctx, set, owner, ttl)
}

// acquireInOrder is the generic multi-name acquire over Backend's contract:
// it takes the names one by one in sorted order, and when one fails it
// releases, in reverse order, every name it took (and the failed one too when
// the failure says nothing about who holds it), so that it never keeps a part
// of the set. A fixed order means two callers of overlapping sets collide on
// the first name they share, not in a cycle.
func (c *Client) acquireInOrder(ctx context.Context, set []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	tokens := make([]fence.Token, len(set))
	for i, name := range set {
		tok, err := c.backend.Acquire(ctx, name, owner, ttl)
		if err != nil {
			taken := set[:i]
			if !errors.Is(err, ErrHeld) {
				taken = set[:i+1] // the failed attempt may have landed
			}
			c.abandonAll(ctx, taken, owner, ttl)
			return nil, err
		}
		tokens[i] = tok
	}
	return tokens, nil
}

// abandonAll releases names for owner in reverse order, best effort, each
// bounded by ttl even if the backend ignores its context. A release whose
// outcome stays unknown leaves that name held by nobody's lease until its
// ttl runs out.
func (c *Client) abandonAll(ctx context.Context, names []string, owner string, ttl time.Duration) {
	for i := len(names) - 1; i >= 0; i-- {
		c.abandon(ctx, names[i], owner, ttl)
	}
}
