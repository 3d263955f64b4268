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
// TestRoundTrips: with nobody waiting, an Acquire with a place costs what
// one without costs on a lease the Backend has not seen (two: a read, the
// take), and a Client's Acquire and Release through it subscribe to
// nothing; a refused call reads the lock and its whole queue in one request
// and writes its place in one more, except a waiter behind another that
// nothing woke since its last read, which renews its place alone; the first
// in line takes the lock in three (the read, the take, the removal of its
// place); Leave is a leader read and a delete marker. (The helper's method
// names are the old per-shape ones, each one driver call.)
func TestQueueRoundTrips(t *testing.T) {
	nc, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := direct{newBackend(t, js, natstest.Bucket(t, js, 1))}
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
	// Once the Backend listens on the lock (the first Await subscribes
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

	client := lock.New(b.Backend, nil)
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
// (never queued here) has nothing that could wake it, so Await waits
// its max instead of returning at once, which would make a caller ask
// again in a loop.
func TestAwaitTurnNotInLineWaitsMax(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := direct{newBackend(t, js, natstest.Bucket(t, js, 1))}
	const max = 100 * time.Millisecond
	start := time.Now()
	if err := b.AwaitTurn(testkit.Context(t), "l", testkit.Owner(t), max); err != nil {
		t.Fatalf("AwaitTurn: %v", err)
	}
	if d := time.Since(start); d < max {
		t.Errorf("AwaitTurn of an owner not in line returned after %v; want its max, %v", d, max)
	}
}

// TestQueueReleaseWakesWaiter is TestPermitReleaseWakesWaiter for the lock
// queue: a release hands the lock to the first in line at once, not at its
// next renewal of its place, and so does a Leave by the first in line to
// the next. The waiters' place TTL is 9 s, so they renew every 3 s; each
// is served within a second of the call that lets it in (drivertest's
// QueueWakesBeforeRenewal asks the same of one Backend on one connection).
// The holders and the waiters are on Backends of their own, on connections
// of their own (two processes, as far as NATS can tell); each case is run
// with the release 300 ms after the waiter queued (it is in Await) and at
// once (racing its first Await, which subscribes).
func TestQueueReleaseWakesWaiter(t *testing.T) {
	const (
		placeTTL = 9 * time.Second
		served   = time.Second
		ttl      = 30 * time.Second
	)
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.cluster(t)
			_, hjs := natstest.Connect(t, c.URLs())
			_, wjs := natstest.Connect(t, c.URLs())
			bucket := natstest.Bucket(t, hjs, top.replicas)
			prefix := testkit.Namespace(t)
			hb := onPrefix(t, hjs, bucket, prefix)
			holders := lock.New(hb, nil)
			waiters := lock.New(onPrefix(t, wjs, bucket, prefix), &lock.Options{Queue: lock.QueueOptions{PlaceTTL: placeTTL}})
			ctx := testkit.Context(t)

			// serve starts the waiters' Acquire of name, runs letIn once it
			// is in line behind ahead others (seen by Inspect) and settle
			// has passed, and reports how long the waiter then took.
			serve := func(t *testing.T, name string, ahead int, settle time.Duration, letIn func() error) {
				t.Helper()
				got := make(chan *lock.Lease, 1)
				go func() {
					l, err := waiters.Acquire(ctx, name, ttl)
					if err != nil {
						t.Errorf("the waiter's Acquire: %v", err)
					}
					got <- l
				}()
				queuedAt := time.Now()
				for {
					info, err := holders.Inspect(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					if info.Waiting > ahead {
						break
					}
					if time.Since(queuedAt) > 5*time.Second {
						t.Fatal("the waiter was not in line within 5 s")
					}
					time.Sleep(time.Millisecond)
				}
				queuedAt = time.Now()
				time.Sleep(settle)
				at := time.Now()
				if err := letIn(); err != nil {
					t.Fatal(err)
				}
				var w *lock.Lease
				select {
				case w = <-got:
				case <-time.After(placeTTL):
					t.Fatal("not served within the place TTL")
				}
				took := time.Since(at)
				t.Logf("served %v after the call that let it in (%v after it was seen in line)", took.Round(time.Millisecond), time.Since(queuedAt).Round(time.Millisecond))
				if w == nil {
					t.Fatal("not served")
				}
				defer w.Release(ctx)
				if took > served {
					t.Fatalf("served %v after the call that let it in; want within %v, before its first renewal (%v)", took, served, placeTTL/3)
				}
			}
			for _, settle := range []time.Duration{300 * time.Millisecond, 0} {
				t.Run(fmt.Sprintf("release after %v", settle), func(t *testing.T) {
					name := fmt.Sprintf("l%d", settle.Milliseconds())
					h, err := holders.TryAcquire(ctx, name, ttl)
					if err != nil {
						t.Fatal(err)
					}
					serve(t, name, 0, settle, func() error { return h.Release(ctx) })
				})
			}
			t.Run("leave", func(t *testing.T) {
				// The first in line, woken by the release, leaves instead
				// of taking the lock: its Leave lets the waiter in.
				h, first := testkit.Owner(t), testkit.Owner(t)
				hd := direct{hb}
				if _, err := hd.Acquire(ctx, "leave", h, ttl); err != nil {
					t.Fatal(err)
				}
				if _, err := hd.AcquireOrEnqueue(ctx, "leave", first, ttl, placeTTL); !errors.Is(err, lock.ErrHeld) {
					t.Fatalf("the first in line: %v; want ErrHeld", err)
				}
				serve(t, "leave", 1, 300*time.Millisecond, func() error {
					if err := hd.Release(ctx, "leave", h); err != nil {
						return err
					}
					return hd.LeaveQueue(ctx, "leave", first)
				})
			})
		})
	}
}

// TestQueueDeadPlaceAheadExpires: the waiter behind a dead waiter (one
// that queued once and stopped renewing its place) asks again when that
// place expires, not at its own next renewal: the server's expiry of the
// place reaches no subscription, so its Await ends at the place's expiry
// by the place message's time and TTL (placeHint), and again every second
// until the server's sweep has removed it. The dead place lives 1 s, the
// live waiter's 15 s (a renewal every 5 s); the live waiter is on a
// Backend and a connection of its own.
func TestQueueDeadPlaceAheadExpires(t *testing.T) {
	const (
		deadPlace = time.Second
		placeTTL  = 15 * time.Second
		ttl       = 30 * time.Second
		// The place's TTL, the server's sweep (about a second) and one
		// placePoll more: well before the live waiter's renewal.
		within = deadPlace + 2*time.Second
	)
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.cluster(t)
			_, hjs := natstest.Connect(t, c.URLs())
			_, wjs := natstest.Connect(t, c.URLs())
			bucket := natstest.Bucket(t, hjs, top.replicas)
			prefix := testkit.Namespace(t)
			hb := direct{onPrefix(t, hjs, bucket, prefix)}
			waiters := lock.New(onPrefix(t, wjs, bucket, prefix), &lock.Options{Queue: lock.QueueOptions{PlaceTTL: placeTTL}})
			ctx := testkit.Context(t)
			h, dead := testkit.Owner(t), testkit.Owner(t)
			if _, err := hb.Acquire(ctx, "l", h, ttl); err != nil {
				t.Fatal(err)
			}
			if _, err := hb.AcquireOrEnqueue(ctx, "l", dead, ttl, deadPlace); !errors.Is(err, lock.ErrHeld) {
				t.Fatalf("the dead waiter queueing: %v; want ErrHeld", err)
			}
			queued := time.Now()
			got := make(chan time.Time, 1)
			go func() {
				l, err := waiters.Acquire(ctx, "l", ttl)
				if err != nil {
					t.Errorf("the live waiter's Acquire: %v", err)
				} else {
					_ = l.Release(ctx)
				}
				got <- time.Now()
			}()
			for {
				info, err := hb.Inspect(ctx, "l")
				if err != nil {
					t.Fatal(err)
				}
				if info.Waiting == 2 {
					break
				}
				if time.Since(queued) > 5*time.Second {
					t.Fatalf("the live waiter was not in line within 5 s (%d waiting)", info.Waiting)
				}
				time.Sleep(time.Millisecond)
			}
			// The dead waiter's turn, which it never takes.
			if err := hb.Release(ctx, "l", h); err != nil {
				t.Fatal(err)
			}
			at := <-got
			took := at.Sub(queued)
			t.Logf("served %v after the dead waiter queued (its place lives %v; the live waiter renews every %v)", took.Round(time.Millisecond), deadPlace, placeTTL/3)
			if took > within {
				t.Fatalf("served %v after the dead waiter queued; want within %v, before the live waiter's renewal (%v)", took, within, placeTTL/3)
			}
		})
	}
}
