package drivertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/faultkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// checkResumeLostReply: a Resume whose reply is lost after the server
// renewed the lease, retried by the same owner, renews it again and returns
// the same token; neither the lost call nor the retry re-creates or
// replaces the lease.
func checkResumeLostReply(ctx context.Context, env FaultEnv) error {
	name, a := env.NS+"lock", owner()
	if err := warmUp(ctx, env, a); err != nil {
		return err
	}
	// Warm the resume call itself up too (a cached script or statement).
	warm := env.NS + "warm-resume"
	if _, err := acquire(ctx, env.Backend, warm, a, longTTL); err != nil {
		return err
	}
	if _, err := resume(ctx, env.Backend, warm, a, longTTL); err != nil {
		return fmt.Errorf("Resume(%q) by the holder: %w", warm, err)
	}
	if err := release(ctx, env.Backend, warm, a); err != nil {
		return fmt.Errorf("Release(%q): %w", warm, err)
	}

	tok, err := acquire(ctx, env.Other, name, a, longTTL)
	if err != nil {
		return err
	}
	const resumed = 2 * time.Minute
	var got fence.Token
	call := fmt.Sprintf("Resume(%q, %v)", name, resumed)
	// A backend that reads before it writes (RequestsBeforeAcquire) reads
	// here too: it has not seen the lease, which Other took.
	callErr, err := faultkit.LoseReplyAfter(ctx, env.Proxy, env.RequestsBeforeAcquire, call,
		func(ctx context.Context) (err error) {
			got, err = resume(ctx, env.Backend, name, a, resumed)
			return err
		},
		func(ctx context.Context) (bool, error) {
			info, err := inspect(ctx, env.Other, name)
			return err == nil && info.TTL > resumed/4, err
		}, nil)
	if err != nil {
		return err
	}
	switch {
	case errors.Is(callErr, driver.ErrNotHeld) || errors.Is(callErr, fence.ErrInvalid):
		return fmt.Errorf("%s, whose reply was lost after the server renewed the lease: %v; its owner still holds it", call, callErr)
	case callErr == nil && got != tok:
		return fmt.Errorf("%s with its reply lost returned token %d; the lease has %d", call, got, tok)
	}
	retry, err := resume(ctx, env.Backend, name, a, resumed)
	if err != nil {
		return fmt.Errorf("%s retried by the same owner after its reply was lost (first call: %v): %v; want the same lease", call, callErr, err)
	}
	if retry != tok {
		return fmt.Errorf("%s retried after its reply was lost: token %d; want %d, the lease's own", call, retry, tok)
	}
	// The Client over the backend resumes it too, with the same token.
	l, err := lock.New(env.Backend, nil).Resume(ctx, name, a, resumed)
	if err != nil {
		return fmt.Errorf("Client.Resume after the lost reply: %w", err)
	}
	if l.Token() != tok {
		return fmt.Errorf("Client.Resume after the lost reply: token %d; want %d", l.Token(), tok)
	}
	return expectHolder(ctx, env.Other, name, a, tok)
}
