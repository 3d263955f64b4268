package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// sortedSet returns a sorted copy of names, checked as the driver's
// set request is (driver.Validate).
func sortedSet(names []string, owner string, ttl time.Duration) ([]string, error) {
	if err := driver.Validate(driver.Request{Names: names, Owner: owner, TTL: ttl, Kind: driver.Exclusive}); err != nil {
		return nil, err
	}
	set := slices.Clone(names)
	slices.Sort(set)
	return set, nil
}

// tryMulti makes one attempt at the whole set: in one step when the
// driver can take it so, otherwise (driver.ErrNotAtomic) in order. It
// releases nothing itself: on failure it returns, with the error, the names
// that owner may hold because of this attempt, for the caller to release
// (acquireMulti). Those are none after ErrHeld or ErrInvalid from the one
// step (which changed nothing), the whole set after any other failure of
// the one step (its outcome is unknown), and in order, every name taken
// before the failure plus the one whose acquire failed, unless that one
// failed with ErrHeld (an answer: another owner holds it).
func (c *Client) tryMulti(ctx context.Context, set []string, owner string, ttl time.Duration) (tokens []fence.Token, mayHold []string, err error) {
	g, err := c.driver.Acquire(ctx, driver.Request{Names: set, Owner: owner, TTL: ttl, Kind: driver.Exclusive, Metadata: metadataFromContext(ctx)})
	switch {
	case errors.Is(err, driver.ErrNotAtomic):
		return c.acquireInOrder(ctx, set, owner, ttl)
	case err == nil && len(g.Tokens) != len(set):
		return nil, set, fmt.Errorf("lock: the backend granted %d tokens for %d names", len(g.Tokens), len(set))
	case err != nil && !errors.Is(err, ErrHeld) && !errors.Is(err, ErrInvalid):
		return nil, set, err
	}
	return g.Tokens, nil, err
}

// acquireInOrder is the generic multi-name acquire over Backend's contract:
// it takes the names one by one in sorted order and stops at the first that
// fails, returning the names it may hold (see tryMulti) for the caller to
// release. A fixed order means two callers of overlapping sets collide on
// the first name they share, not in a cycle.
func (c *Client) acquireInOrder(ctx context.Context, set []string, owner string, ttl time.Duration) ([]fence.Token, []string, error) {
	tokens := make([]fence.Token, len(set))
	for i, name := range set {
		g, err := c.grant(ctx, name, owner, ttl)
		if err != nil {
			if errors.Is(err, ErrHeld) {
				return nil, set[:i], err
			}
			return nil, set[:i+1], err // the failed attempt may have landed
		}
		tokens[i] = g.Token
	}
	return tokens, nil, nil
}

// releaseNames releases owner's lease on each of names, in reverse order,
// one request each. It returns the names whose release the backend did not
// confirm (sorted), and an error: nil when it confirmed every one (the
// lease was released, or ErrNotHeld: owner holds none, also when an earlier
// release whose reply was lost had applied), otherwise the first failure
// that a retry cannot cure, or else the last failure. A release cut short by
// ctx is a failure whose outcome is unknown.
func (c *Client) releaseNames(ctx context.Context, names []string, owner string) (left []string, err error) {
	for i := len(names) - 1; i >= 0; i-- {
		name := names[i]
		rerr := bounded(ctx, func(ctx context.Context) error { return c.release(ctx, name, owner) })
		if rerr == nil || errors.Is(rerr, ErrNotHeld) {
			continue
		}
		left = append(left, name)
		if err == nil || driver.Retryable(err) {
			err = fmt.Errorf("release of %q: %w", name, rerr)
		}
	}
	slices.Reverse(left)
	return left, err
}

// releaseLater goes on releasing names in the background after an acquiring
// call gave up without the backend confirming that owner holds none of
// them: each is tried again, after a pause that doubles up to 100ms, until
// the backend confirms it, a failure says a retry cannot cure it, or until
// passes, by when the leases the call may have left have expired anyway.
// ctx carries the values of the caller's context, not its cancellation.
func (c *Client) releaseLater(ctx context.Context, names []string, owner string, until time.Time) {
	ctx, cancel := context.WithDeadline(ctx, until)
	go func() {
		defer cancel()
		for pause := time.Millisecond; len(names) > 0; pause = min(2*pause, 100*time.Millisecond) {
			if !sleep(ctx, pause) {
				return
			}
			var err error
			if names, err = c.releaseNames(ctx, names, owner); err != nil && !driver.Retryable(err) {
				return
			}
		}
	}()
}

// addNames returns the sorted union of held and names. held must not share
// its array with names (or with a set that names is a part of).
func addNames(held []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(held, n) {
			held = append(held, n)
		}
	}
	slices.Sort(held)
	return held
}
