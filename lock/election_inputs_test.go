package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

func TestElectionRefusesABadTTL(t *testing.T) {
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond} {
		f := &faultyBackend{Backend: memory.NewBackend()}
		e := lock.New(f, nil).Election("leader", ttl)
		if _, err := e.Leader(context.Background()); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Leader with ttl %v = %v; want ErrInvalid", ttl, err)
		}
		if _, err := e.Campaign(context.Background()); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Campaign with ttl %v = %v; want ErrInvalid", ttl, err)
		}
		if n := f.attempts.Load(); n != 0 {
			t.Errorf("ttl %v: %d acquire(s) sent; want 0", ttl, n)
		}
	}
}

// TestResignOfALostLeadershipSaysSo: a leadership lost on this side only
// (its renewals failed for good, the backend still holds its lease) is not
// resigned in silence: Resign reports ErrNotHeld and ErrLost, as its doc
// says, and still frees the lock on the backend.
func TestResignOfALostLeadershipSaysSo(t *testing.T) {
	mem := memory.NewBackend()
	f := &faultyBackend{Backend: mem, extendErr: func() error { return errPermanent }}
	// Lost at the first renewal, a third of the TTL in; the backend holds
	// the lease for two thirds more: room for the checks below.
	l, err := lock.New(f, nil).Election("leader", 3*time.Second).Campaign(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the leadership lost at its first renewal")
	if info, _ := inspectLock(context.Background(), mem, "leader"); !info.Held {
		t.Fatal("the backend no longer holds the lease: the test needs a loss on this side only")
	}
	err = l.Resign(context.Background())
	if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Resign of a lost leadership = %v; want ErrNotHeld and ErrLost", err)
	}
	if info, _ := inspectLock(context.Background(), mem, "leader"); info.Held {
		t.Fatalf("Resign left the lock held on the backend: %+v", info)
	}
	if err := l.Resign(context.Background()); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("a second Resign = %v; want ErrLost again", err)
	}
}
