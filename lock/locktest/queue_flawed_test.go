package locktest_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// queueFlaws are realistic bugs of a queued backend, one per field, each
// on top of the correct memory.Backend.
type queueFlaws struct {
	noWakeOnRelease   bool // AwaitTurn only times out: waiters poll at their renewal
	noExpiryTTL       bool // the first in line is not told the holder's TTL
	placesNeverExpire bool // a waiter that stopped renewing keeps its place
	leaveIgnored      bool // LeaveQueue does nothing
	awaitIgnoresCtx   bool // AwaitTurn does not look at its context
	dropsEarlyWake    bool // a wake-up sent before AwaitTurn is lost
}

type flawedQueue struct {
	*memory.Backend
	f queueFlaws
}

func (q *flawedQueue) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	if q.f.placesNeverExpire {
		place = time.Hour
	}
	tok, err := q.Backend.AcquireOrEnqueue(ctx, name, owner, ttl, place)
	var he *lock.HeldError
	if q.f.noExpiryTTL && errors.As(err, &he) {
		return 0, &lock.HeldError{Name: name}
	}
	return tok, err
}

func (q *flawedQueue) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	switch {
	case q.f.awaitIgnoresCtx:
		time.Sleep(max)
		return nil
	case q.f.dropsEarlyWake:
		// Forget what arrived before this call, then wait.
		_ = q.Backend.AwaitTurn(ctx, name, owner, 0)
		return q.Backend.AwaitTurn(ctx, name, owner, max)
	case q.f.noWakeOnRelease:
		t := time.NewTimer(max)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return q.Backend.AwaitTurn(ctx, name, owner, max)
}

func (q *flawedQueue) LeaveQueue(ctx context.Context, name, owner string) error {
	if q.f.leaveIgnored {
		return nil
	}

	return q.Backend.LeaveQueue(ctx, name, owner)
}

// lifoQueue serves its waiters newest first: each name's waiters form a
// stack, and only its top may take the free lock. It polls (AwaitTurn
// returns within 5ms), so only its order is wrong.
type lifoQueue struct {
	*memory.Backend
	mu     sync.Mutex
	stacks map[string][]string
}

func (q *lifoQueue) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	if err := lock.ValidatePlace(name, owner, ttl, place); err != nil {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stacks[name]
	if !slices.Contains(st, owner) {
		st = append(st, owner)
	}
	if st[len(st)-1] == owner {
		tok, err := q.Backend.Acquire(ctx, name, owner, ttl)
		if err == nil {
			st = st[:len(st)-1]
		}
		q.stacks[name] = st
		return tok, err
	}
	q.stacks[name] = st
	return 0, &lock.HeldError{Name: name}
}

func (q *lifoQueue) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	t := time.NewTimer(min(max, 5*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *lifoQueue) LeaveQueue(ctx context.Context, name, owner string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stacks[name] = slices.DeleteFunc(q.stacks[name], func(o string) bool { return o == owner })
	return nil
}

func queueCheck(t *testing.T, name string) locktest.Check {
	t.Helper()
	for _, c := range locktest.QueueChecks() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no queue check named %q", name)
	return locktest.Check{}
}

// TestQueueChecksCatchFlaws shows that every queue check fails on a
// backend that breaks its rule: each flaw is caught by the check named.
func TestQueueChecksCatchFlaws(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flaw    string
		check   string
		backend lock.Backend
	}{
		{"lifo", "QueueServesInArrivalOrder", &lifoQueue{Backend: memory.NewBackend(), stacks: map[string][]string{}}},
		{"noWakeOnRelease", "QueueServesInArrivalOrder", &flawedQueue{memory.NewBackend(), queueFlaws{noWakeOnRelease: true}}},
		{"noExpiryTTL", "QueueWakesAtHolderExpiry", &flawedQueue{memory.NewBackend(), queueFlaws{noExpiryTTL: true}}},
		{"placesNeverExpire", "QueueSkipsDeadWaiter", &flawedQueue{memory.NewBackend(), queueFlaws{placesNeverExpire: true}}},
		{"leaveIgnored", "QueueSkipsCancelledWaiter", &flawedQueue{memory.NewBackend(), queueFlaws{leaveIgnored: true}}},
		{"awaitIgnoresCtx", "QueueAwaitTurnHonoursContext", &flawedQueue{memory.NewBackend(), queueFlaws{awaitIgnoresCtx: true}}},
		{"leaveIgnored/wake", "QueueLeaveWakesNext", &flawedQueue{memory.NewBackend(), queueFlaws{leaveIgnored: true}}},
		{"dropsEarlyWake", "QueueKeepsEarlyWakeUp", &flawedQueue{memory.NewBackend(), queueFlaws{dropsEarlyWake: true}}},
		{"noQueue", "QueueServesInArrivalOrder", memory.NewBackend()}, // hidden below: a plain Backend
	}
	for _, tc := range cases {
		t.Run(tc.flaw, func(t *testing.T) {
			t.Parallel()
			b := tc.backend
			if tc.flaw == "noQueue" {
				b = struct{ lock.Backend }{b} // the capability hidden
			}
			ctx, cancel := context.WithTimeout(context.Background(), locktest.Timeout)
			defer cancel()
			err := queueCheck(t, tc.check).Run(ctx, b, locktest.Namespace())
			if err == nil {
				t.Fatalf("%s passed on a backend with the flaw %s", tc.check, tc.flaw)
			}
			t.Logf("caught: %v", err)
		})
	}
}

// TestQueueChecksPassOnMemory runs the queue checks on their own, on a
// fresh correct backend each.
func TestQueueChecksPassOnMemory(t *testing.T) {
	t.Parallel()
	locktest.RunQueue(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}
