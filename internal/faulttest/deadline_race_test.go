package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// A holder that does not touch its lease until the local deadline has
// passed (a paused holder): the deadline timer must not race newLease.
func TestLeaseDeadlineTimerDoesNotRace(t *testing.T) {
	lost := make(chan struct{}, 1)
	c := lock.New(memory.NewBackend(), &lock.Options{Observer: &lock.Observer{Lost: func(lock.Event) {
		lost <- struct{}{}
	}}})
	l, err := c.TryAcquire(context.Background(), "race", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-lost // the holder itself does nothing until its lease is gone
	_ = l
}
