package nats_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestQueueRoundTrips pins the round trips of queued waiting, counted as in
// TestRoundTrips: with nobody waiting, AcquireOrEnqueue costs what Acquire
// costs on a lease the Backend has not seen (two: a read, the take), and a
// Client's Acquire and Release through it subscribe to nothing; a refused
// call reads the lock and its whole queue in one request and writes its
// place in one more, except a waiter behind another that nothing woke since
// its last read, which renews its place alone; the first in line takes the lock in three (the read,
// the take, the removal of its place); LeaveQueue is a leader read and a
// delete marker.
func TestQueueRoundTrips(t *testing.T) {
	nc, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := newBackend(t, js, natstest.Bucket(t, js, 1))
	ctx := testkit.Context(t)
	h, a, s := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	const ttl, place = 10 * time.Second, 10 * time.Second

	want := func(what string, want uint64, op func() error) {
		t.Helper()
		before := requests(nc)
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := requests(nc) - before; got != want {
			t.Errorf("%s took %d round trips; want %d", what, got, want)
		}
	}
	held := func(who string) func() error {
		return func() error {
			if _, err := b.AcquireOrEnqueue(ctx, "l", who, ttl, place); !errors.Is(err, lock.ErrHeld) {
				return fmt.Errorf("%v; want ErrHeld", err)
			}
			return nil
		}
	}
	want("Acquire of a lock the Backend has not seen (the baseline)", 2, func() error {
		_, err := b.Acquire(ctx, "m", h, ttl)
		return err
	})
	want("AcquireOrEnqueue of a free lock nobody waits for", 2, func() error {
		_, err := b.AcquireOrEnqueue(ctx, "l", h, ttl, place)
		return err
	})
	want("AcquireOrEnqueue of a held lock (a new place)", 2, held(a))
	want("AcquireOrEnqueue by the second in line (a new place)", 2, held(s))
	want("AcquireOrEnqueue by the first in line (its place renewed)", 2, held(a))
	// Once the Backend listens on the lock (the first AwaitTurn subscribes
	// and reads the key waited on, on the leader), a waiter behind another
	// that nothing woke renews its place alone, without reading the line.
	want("the first AwaitTurn of the second in line", 1, func() error { return b.AwaitTurn(ctx, "l", s, time.Millisecond) })
	want("AcquireOrEnqueue by the second in line (reads the line: listening began after its last read)", 2, held(s))
	want("AcquireOrEnqueue by the second in line, not woken (its place renewed alone)", 1, held(s))
	want("Release", 1, func() error { return b.Release(ctx, "l", h) })
	want("AcquireOrEnqueue by the first in line after the release", 3, func() error {
		_, err := b.AcquireOrEnqueue(ctx, "l", a, ttl, place)
		return err
	})
	want("LeaveQueue", 2, func() error { return b.LeaveQueue(ctx, "l", s) })
	want("LeaveQueue of an owner without a place", 1, func() error { return b.LeaveQueue(ctx, "l", s) })
	if err := b.Release(ctx, "l", a); err != nil {
		t.Fatal(err)
	}

	client := lock.New(b, nil)
	subs := nc.NumSubscriptions()
	want("Client Acquire + Release of a lock nobody waits for", 3, func() error {
		l, err := client.Acquire(ctx, "n", ttl)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
	if got := nc.NumSubscriptions(); got != subs {
		t.Errorf("an uncontended Acquire + Release left %d subscriptions; want %d", got, subs)
	}
}

// TestAwaitTurnNotInLineWaitsMax: an owner the Backend keeps no wait for
// (never queued here) has nothing that could wake it, so AwaitTurn waits
// its max instead of returning at once, which would make a caller ask
// again in a loop.
func TestAwaitTurnNotInLineWaitsMax(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := newBackend(t, js, natstest.Bucket(t, js, 1))
	const max = 100 * time.Millisecond
	start := time.Now()
	if err := b.AwaitTurn(testkit.Context(t), "l", testkit.Owner(t), max); err != nil {
		t.Fatalf("AwaitTurn: %v", err)
	}
	if d := time.Since(start); d < max {
		t.Errorf("AwaitTurn of an owner not in line returned after %v; want its max, %v", d, max)
	}
}
