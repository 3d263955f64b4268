package drivertest

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// warmPermits sends each permit call once through env.Backend (a
// connection in the pool, a script or statement cached), so that the call
// whose reply a check loses reaches the server while replies are held.
func warmPermits(ctx context.Context, env FaultEnv) error {
	b := env.Backend
	name, o := env.NS+"warm-permit", owner()
	if _, err := b.Acquire(ctx, semaphoreReq(name, o, 1, longTTL, 0)); err != nil {
		return fmt.Errorf("Acquire of the permit %q: %w", name, err)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, owner(), 1, longTTL, permitPlaceTTL)); !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire of the permit %q with a place while held: %v; want ErrHeld", name, err)
	}
	if err := b.Extend(ctx, permitClaim(name, o), longTTL); err != nil {
		return fmt.Errorf("Extend of the permit %q: %w", name, err)
	}
	if _, err := inspectPermits(ctx, b, name); err != nil {
		return err
	}
	return b.Release(ctx, permitClaim(name, o))
}

// checkPermitAcquireLostReply: an Acquire of a permit whose reply is lost after
// the server granted the permit, retried by the same owner, gets the same
// token, never ErrHeld, and the semaphore of one permit has one holder.
func checkPermitAcquireLostReply(ctx context.Context, env FaultEnv) error {
	b, other := env.Backend, env.Other
	if err := warmPermits(ctx, env); err != nil {
		return err
	}
	name, a := env.NS+"sem", owner()
	call := fmt.Sprintf("Acquire of the permit %q", name)
	var got driver.Grant
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforePermit, call,
		func(ctx context.Context) (err error) {
			got, err = b.Acquire(ctx, semaphoreReq(name, a, 1, longTTL, 0))
			return err
		},
		func(ctx context.Context) (bool, error) {
			ps, err := inspectPermits(ctx, other, name)
			return err == nil && len(ps.Holders) > 0, err
		}, nil)
	if err != nil {
		return err
	}
	if errors.Is(callErr, driver.ErrHeld) {
		return fmt.Errorf("%s, whose reply was lost after the server granted it: %v; its owner holds the permit", call, callErr)
	}
	ps, err := inspectPermits(ctx, other, name)
	if err != nil {
		return err
	}
	if len(ps.Holders) != 1 || ps.Holders[0].Owner != a {
		return fmt.Errorf("after the lost reply: holders %+v; want owner %s alone", ps.Holders, a)
	}
	tok := ps.Holders[0].Token
	if callErr == nil && got.Token != tok {
		return fmt.Errorf("%s with its reply lost returned token %d; the permit has %d", call, got.Token, tok)
	}
	retry, err := b.Acquire(ctx, semaphoreReq(name, a, 1, longTTL, 0))
	if err != nil {
		return fmt.Errorf("%s retried by the same owner after its reply was lost: %w; want the same permit", call, err)
	}
	if retry.Token != tok {
		return fmt.Errorf("%s retried after its reply was lost: token %d; want %d", call, retry.Token, tok)
	}
	return b.Release(ctx, permitClaim(name, a))
}

// checkPermitQueueLostReply: an Acquire of a permit with a place, refused and
// queued, whose reply is lost, retried by the same owner, keeps one place:
// a waiter is never in line twice.
func checkPermitQueueLostReply(ctx context.Context, env FaultEnv) error {
	b, other := env.Backend, env.Other
	if err := warmPermits(ctx, env); err != nil {
		return err
	}
	name, holder, w := env.NS+"sem", owner(), owner()
	if _, err := other.Acquire(ctx, semaphoreReq(name, holder, 1, longTTL, 0)); err != nil {
		return err
	}
	call := fmt.Sprintf("Acquire of the permit %q with a place", name)
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforePermit, call,
		func(ctx context.Context) error {
			_, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL))
			return err
		},
		func(ctx context.Context) (bool, error) {
			ps, err := inspectPermits(ctx, other, name)
			return err == nil && ps.Waiting > 0, err
		}, nil)
	if err != nil {
		return err
	}
	if callErr == nil {
		return fmt.Errorf("%s while the permit is held: granted", call)
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("%s retried: %v; want ErrHeld", call, err)
	}
	ps, err := inspectPermits(ctx, other, name)
	if err != nil {
		return err
	}
	if ps.Waiting != 1 {
		return fmt.Errorf("one waiter whose queued reply was lost, retried: %d places; want 1", ps.Waiting)
	}
	if err := other.Release(ctx, permitClaim(name, holder)); err != nil {
		return err
	}
	if _, err := b.Acquire(ctx, semaphoreReq(name, w, 1, longTTL, permitPlaceTTL)); err != nil {
		return fmt.Errorf("the waiter after the release: %w", err)
	}
	return b.Release(ctx, permitClaim(name, w))
}
