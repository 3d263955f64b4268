package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestAcquireQueuedReleaserWaitsItsTurn: the worker that releases and at
// once acquires again no longer takes the lock straight back from a worker
// that was already waiting (with polling it did, nearly every time): it
// queues behind it.
func TestAcquireQueuedReleaserWaitsItsTurn(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	c := lock.New(b, nil)
	a1, err := c.Acquire(ctx, "l", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{})
	var once atomic.Bool
	waiter := lock.New(b, &lock.Options{Observer: &lock.Observer{Retrying: func(lock.Event) {
		if once.CompareAndSwap(false, true) {
			close(queued)
		}
	}}})
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "l", time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-queued:
	case <-time.After(waitLimit):
		t.Fatal("the waiter was never refused")
	}
	if err := a1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again := make(chan *lock.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, "l", time.Minute)
		if err != nil {
			t.Error(err)
		}
		again <- l
	}()
	var w *lock.Lease
	select {
	case w = <-got:
	case l := <-again:
		t.Fatalf("the releasing worker took the lock back (token %d) ahead of the waiter", l.Token())
	case <-time.After(waitLimit):
		t.Fatal("the waiter was not served after the release")
	}
	if w.Token() <= a1.Token() {
		t.Fatalf("waiter's token %d not above %d", w.Token(), a1.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case a2 := <-again:
		if a2.Token() <= w.Token() {
			t.Fatalf("token %d not above %d", a2.Token(), w.Token())
		}
		_ = a2.Release(ctx)
	case <-time.After(waitLimit):
		t.Fatal("the second Acquire was not served after the waiter released")
	}
}

// TestAcquireQueuedAttemptsEventsAndLeaving: a queued Acquire counts every
// request as an attempt, reports each refused one but the last as
// Retrying, and gives up its place when it gives up.
func TestAcquireQueuedAttemptsEventsAndLeaving(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	if _, err := takeLock(ctx, b, "l", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	var retrying atomic.Int32
	c := lock.New(b, &lock.Options{
		Queue:    lock.QueueOptions{PlaceTTL: 30 * time.Millisecond},
		Observer: &lock.Observer{Retrying: func(lock.Event) { retrying.Add(1) }},
	})
	_, err := c.Acquire(ctx, "l", time.Minute, lock.WithMaxAttempts(3))
	if !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Acquire = %v; want ErrNotAcquired and ErrHeld", err)
	}
	if n := retrying.Load(); n != 2 {
		t.Fatalf("%d Retrying events; want 2 (attempts 1 and 2 of 3)", n)
	}
	if w := b.Waiting("l"); len(w) != 0 {
		t.Fatalf("waiting after giving up: %v; want nobody", w)
	}

	// A cancelled context ends the wait at once and leaves the queue too.
	cctx, cancel := context.WithCancel(ctx)
	c2 := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: time.Minute}})
	done := make(chan error, 1)
	go func() {
		_, err := c2.Acquire(cctx, "l", time.Minute)
		done <- err
	}()
	deadline := time.Now().Add(waitLimit)
	for len(b.Waiting("l")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("Acquire = %v; want ErrNotAcquired and context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Acquire did not return after its context was cancelled")
	}
	if w := b.Waiting("l"); len(w) != 0 {
		t.Fatalf("waiting after a cancelled Acquire: %v; want nobody", w)
	}
}

// TestTryAcquireBargesAheadOfQueue: TryAcquire does not queue, and takes a
// free lock even while others wait in line, as its doc says. So does an
// Acquire limited to one attempt, and Acquire with QueueOptions.Polling
// never queues.
func TestTryAcquireBargesAheadOfQueue(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	if _, err := takeLock(ctx, b, "l", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	waiter := driver.Request{Name: "l", Owner: "waiter", TTL: time.Minute, Kind: driver.Exclusive, Place: time.Minute}
	if _, err := b.Acquire(ctx, waiter); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Acquire with a place = %v; want ErrHeld", err)
	}
	c := lock.New(b, nil)
	if _, err := c.TryAcquire(ctx, "l", time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("TryAcquire of a held lock = %v; want ErrHeld", err)
	}
	if _, err := c.Acquire(ctx, "l", time.Minute, lock.WithMaxAttempts(1)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("Acquire with one attempt of a held lock = %v; want ErrHeld", err)
	}
	if w := b.Waiting("l"); len(w) != 1 || w[0] != "waiter" {
		t.Fatalf("waiting = %v; want only the waiter (TryAcquire does not queue)", w)
	}
	if err := releaseLock(ctx, b, "l", "holder"); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "l", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire of a free lock with a waiter in line = %v; want the lock", err)
	}
	polling := lock.New(b, &lock.Options{Queue: lock.QueueOptions{Polling: true}})
	pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := polling.Acquire(pctx, "l", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("polling Acquire of a held lock = %v; want ErrNotAcquired", err)
	}
	if w := b.Waiting("l"); len(w) != 1 || w[0] != "waiter" {
		t.Fatalf("waiting = %v; want only the waiter (a polling Acquire does not queue)", w)
	}
	_ = l.Release(ctx)
}

// TestAcquireQueuedRefusesShortPlace: a place TTL below MinPlaceTTL is bad
// input, refused before anything is sent.
func TestAcquireQueuedRefusesShortPlace(t *testing.T) {
	b := memory.NewBackend()
	c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: time.Millisecond}})
	if _, err := c.Acquire(context.Background(), "l", time.Minute); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Acquire = %v; want ErrInvalid", err)
	}
	if info, _ := inspectLock(context.Background(), b, "l"); info.Held {
		t.Fatal("the lock was taken")
	}
}

// flakyQueue fails its first Acquire with a place transiently and, when
// deafAwait is set, every Await at once (a broken wake-up channel). calls
// counts the Acquires with a place.
type flakyQueue struct {
	*memory.Backend
	calls     atomic.Int32
	deafAwait bool
}

func (f *flakyQueue) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Place > 0 && f.calls.Add(1) == 1 {
		return driver.Grant{}, driver.Transient(errors.New("connection reset"))
	}
	return f.Backend.Acquire(ctx, req)
}

func (f *flakyQueue) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if f.deafAwait {
		return errors.New("subscription failed")
	}
	return f.Backend.Await(ctx, c, max)
}

// TestAcquireQueuedSurvivesFailures: a transient failure of an attempt is
// retried after a backoff, and a wake-up channel that fails makes the
// waiter sleep until its renewal instead of spinning.
func TestAcquireQueuedSurvivesFailures(t *testing.T) {
	ctx := context.Background()
	f := &flakyQueue{Backend: memory.NewBackend(), deafAwait: true}
	if _, err := takeLock(ctx, f.Backend, "l", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := lock.New(f, &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 60 * time.Millisecond}})
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "l", time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // a window to count calls in, not a synchronisation
	if n := f.calls.Load(); n < 2 || n > 40 {
		t.Fatalf("%d Acquire calls with a place in 200ms with renewals every 20ms; want a few, neither none nor a spin", n)
	}
	if err := releaseLock(ctx, f.Backend, "l", "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("the waiter was not served")
	}
}

// TestDoWaitsInLine: Do acquires through the queue as Acquire does.
func TestDoWaitsInLine(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	if _, err := takeLock(ctx, b, "l", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	c := lock.New(b, nil)
	ran := make(chan error, 1)
	go func() {
		ran <- c.Do(ctx, "l", time.Minute, func(context.Context, *lock.Lease) error { return nil })
	}()
	deadline := time.Now().Add(waitLimit)
	for len(b.Waiting("l")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Do never queued")
		}
		time.Sleep(time.Millisecond)
	}
	if err := releaseLock(ctx, b, "l", "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Do was not served after the release")
	}
}
