package locktest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Durations the checks use. A short TTL is one the checks wait out; a long
// TTL is one that must not run out during a check.
const (
	shortTTL = 60 * time.Millisecond
	longTTL  = 10 * time.Second
	waitFor  = 5 * time.Second // how long to poll for an expected state
)

func owner() string {
	o, err := lock.NewOwner()
	if err != nil {
		panic(err)
	}
	return o
}

// acquire fails unless owner takes name.
func acquire(ctx context.Context, b lock.Backend, name, owner string, ttl time.Duration) (fence.Token, error) {
	tok, err := b.Acquire(ctx, name, owner, ttl)
	if err != nil {
		return 0, fmt.Errorf("Acquire(%q) on a free lock: %w", name, err)
	}
	if !tok.Valid() {
		return 0, fmt.Errorf("Acquire(%q) minted token %d, outside 1..MaxToken", name, tok)
	}
	return tok, nil
}

// expectHolder fails unless Inspect reports owner holding name with token.
func expectHolder(ctx context.Context, b lock.Backend, name, owner string, token fence.Token) error {
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if !info.Held || info.Owner != owner || info.Token != token {
		return fmt.Errorf("Inspect(%q) = held %v by %q with token %d; want held by %q with token %d", name, info.Held, info.Owner, info.Token, owner, token)
	}
	return nil
}

// expectFree fails unless Inspect reports name free.
func expectFree(ctx context.Context, b lock.Backend, name string) error {
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect(%q): %w", name, err)
	}
	if info.Held {
		return fmt.Errorf("Inspect(%q) = held by %q with token %d; want free", name, info.Owner, info.Token)
	}
	return nil
}

// waitFree polls until name is free, failing after waitFor.
func waitFree(ctx context.Context, b lock.Backend, name string) error {
	deadline := time.Now().Add(waitFor)
	for {
		info, err := b.Inspect(ctx, name)
		if err != nil {
			return fmt.Errorf("Inspect(%q): %w", name, err)
		}
		if !info.Held {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lock %q still held %v after its TTL should have run out (TTL left %v)", name, waitFor, info.TTL)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitChan waits for ch to close, failing after waitFor.
func waitChan(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(waitFor):
		return fmt.Errorf("%s did not happen within %v", what, waitFor)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func expectIs(op string, err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("%s: error %v; want one matching %v", op, err, target)
	}
	return nil
}

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
