package drivertest

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// An owner value can come back after its lease ended: a caller of
// Backend.Acquire that keeps one owner for a process, or a holder that
// persisted its owner and resumes after a restart. The lock is free (or
// expired) when it comes back, so the contract's first rule applies: the
// token must be above every token ever issued for the name. A backend
// whose same-owner branch ("return the holder's own token") also matches a
// released or expired lease record hands that owner its old token back,
// and the owner's writes then pass fences set by holders in between.

// checkReusedOwnerAfterRelease: an owner that released the lock and takes
// it again gets a new, higher token, also when another owner held it in
// between.
func checkReusedOwnerAfterRelease(ctx context.Context, b driver.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	var seen tokenLog
	step := func(o, what string) error {
		tok, err := seen.acquireAbove(ctx, b, name, o, longTTL, what)
		if err != nil {
			return err
		}
		if err := expectHolder(ctx, b, name, o, tok); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := release(ctx, b, name, o); err != nil {
			return fmt.Errorf("%s: Release by the holder: %w", what, err)
		}
		return nil
	}
	return steps(step,
		a, "first Acquire",
		a, "Acquire by the same owner after its own Release",
		c, "Acquire by another owner",
		a, "Acquire by the first owner after another owner's Release",
	)
}

// checkReusedOwnerAfterExpiry: an owner whose lease expired and takes the
// lock again gets a new, higher token, also when another owner's lease
// expired in between.
func checkReusedOwnerAfterExpiry(ctx context.Context, b driver.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	var seen tokenLog
	step := func(o, what string) error {
		var err error
		w := timed(func() { _, err = seen.acquireAbove(ctx, b, name, o, shortTTL, what) })
		if err != nil {
			return err
		}
		if _, err := waitExpiry(ctx, b, name, w.call, shortTTL); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := steps(step,
		a, "first Acquire",
		a, "Acquire by the same owner after its lease expired",
		c, "Acquire by another owner",
		a, "Acquire by the first owner after another owner's lease expired",
	); err != nil {
		return err
	}
	// The owner comes back once more and holds on: Inspect shows the new token.
	tok, err := seen.acquireAbove(ctx, b, name, a, longTTL, "Acquire by the first owner after its lease expired again")
	if err != nil {
		return err
	}
	return expectHolder(ctx, b, name, a, tok)
}

// steps runs step on each (owner, description) pair in turn, up to the
// first failure.
func steps(step func(o, what string) error, pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := step(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// tokenLog is the highest token a check has seen minted for one name.
type tokenLog struct{ max fence.Token }

// acquireAbove takes name for o, expecting the lock to be free, and fails
// unless the token is above every token seen before.
func (s *tokenLog) acquireAbove(ctx context.Context, b driver.Backend, name, o string, ttl time.Duration, what string) (fence.Token, error) {
	tok, err := acquire(ctx, b, name, o, ttl)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if tok <= s.max {
		return 0, fmt.Errorf("%s minted token %d, not above %d, the highest token issued before for %q: a free or expired lock must be taken with a new, higher token, whoever the owner", what, tok, s.max, name)
	}
	s.max = tok
	return tok, nil
}
