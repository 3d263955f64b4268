// Package wake is the mailbox of a queued waiter (driver.Backend's Await),
// which the adapters that push wake-ups share: a channel of capacity one,
// into which a wake-up is posted without blocking and kept until the waiter
// reads it, so that a wake-up sent before Await is called is not lost.
package wake

import (
	"context"
	"time"
)

// NewBox returns an empty mailbox.
func NewBox() chan struct{} { return make(chan struct{}, 1) }

// Post leaves a wake-up in box, unless one is already waiting there.
func Post(box chan<- struct{}) {
	select {
	case box <- struct{}{}:
	default: // a wake-up is already waiting
	}
}

// Wait waits for a wake-up in box (nil: none can come), at most max, or
// until ctx ends. It returns nil when woken or when max passed, and
// ctx.Err() when ctx ended first. A wake-up already waiting counts, even
// when max is 0.
func Wait(ctx context.Context, box <-chan struct{}, max time.Duration) error {
	select {
	case <-box:
		return nil
	default:
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-box:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
