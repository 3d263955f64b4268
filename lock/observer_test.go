package lock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// An Observer with only some fields set gets only those events; the nil
// fields are skipped, the lease's life goes on as without an Observer.
func TestObserverCallsOnlyTheFieldsSet(t *testing.T) {
	ctx := context.Background()
	b := memory.NewBackend()
	var got []string
	client := lock.New(b, &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond, Observer: &lock.Observer{
		Released: func(e lock.Event) { got = append(got, "released "+e.Name) },
	}})
	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Acquire(ctx, "job", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second Acquire = %v; want ErrNotAcquired after a retry", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := client.TryAcquire(ctx, "short", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	await(t, short.Done(), "the short lease lost")
	if want := []string{"released job"}; !slices.Equal(got, want) {
		t.Fatalf("events %v; want %v (acquired, extended, retrying, lost skipped)", got, want)
	}
}

// An Observer with no field set, and a nil one, change nothing.
func TestEmptyObserver(t *testing.T) {
	ctx := context.Background()
	for _, obs := range []*lock.Observer{nil, {}} {
		client := lock.New(memory.NewBackend(), &lock.Options{KeepAlive: true, Observer: obs})
		lease, err := client.TryAcquire(ctx, "job", 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Extend(ctx, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		await(t, lease.Done(), "released")
	}
}

// Each event reaches the field of its kind, and New copies the Observer:
// fields set after New are not called.
func TestObserverFieldPerKind(t *testing.T) {
	ctx := context.Background()
	b, store := memory.NewBackend(), memory.NewStore()
	rec := &recorder{}
	obs := rec.observer()
	client := lock.New(b, &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond, Observer: obs})
	obs.Acquired = func(lock.Event) { t.Error("a field set after New was called") }

	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := store.Advance(ctx, "k", lease.Token()+1); err != nil {
		t.Fatal(err)
	}
	_ = lease.Fenced(store).Put(ctx, "k", nil)
	_, _ = client.Acquire(ctx, "job", time.Minute)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := client.TryAcquire(ctx, "short", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	await(t, short.Done(), "the short lease lost")

	want := []string{"acquired", "extended", "stale", "retrying", "released", "acquired", "lost"}
	if got := rec.kinds(); !slices.Equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	causes := map[string]string{"stale": "stale", "retrying": "held", "lost": "deadline", "acquired": "", "extended": "", "released": ""}
	for kind, cause := range causes {
		for _, e := range rec.of(kind) {
			if c := e.Cause(); c != cause {
				t.Errorf("%s event's Cause = %q; want %q", kind, c, cause)
			}
		}
	}
}
