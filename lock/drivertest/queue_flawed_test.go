package drivertest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// queueFlaws are realistic bugs of queued waiting, one per field, each on
// top of the correct memory backend.
type queueFlaws struct {
	noWakeOnRelease   bool // Await only times out: waiters poll at their renewal
	noExpiryTTL       bool // the first in line is not told the holder's TTL
	placesNeverExpire bool // a waiter that stopped renewing keeps its place
	leaveIgnored      bool // Leave does nothing
	awaitIgnoresCtx   bool // Await does not look at its context
	dropsEarlyWake    bool // a wake-up sent before Await is lost
	pollsSlowly       bool // Await ignores wake-ups and returns after slowPoll at most
}

// slowPoll is how often a backend with the flaw pollsSlowly has its
// waiters ask again: within the 5 s in which most queue checks want a
// waiter served, but long after the release that let it in.
const slowPoll = 2 * time.Second

// sleepAwait is an Await that nothing wakes: it returns after max, or
// with the context's error.
func sleepAwait(ctx context.Context, max time.Duration) error {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flawedQueue breaks queued waiting on locks (an Acquire with a place,
// Await and Leave of a lock) and passes every other call to the memory
// backend it embeds.
type flawedQueue struct {
	driver.Backend
	f queueFlaws
}

// inLine reports whether req is an Acquire of a lock with a place.
func inLine(req driver.Request) bool {
	return req.Kind == driver.Exclusive && req.Names == nil && req.Place > 0
}

func (q *flawedQueue) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !inLine(req) {
		return q.Backend.Acquire(ctx, req)
	}
	if q.f.placesNeverExpire {
		req.Place = time.Hour
	}
	g, err := q.Backend.Acquire(ctx, req)
	var he *driver.HeldError
	if q.f.noExpiryTTL && errors.As(err, &he) {
		return driver.Grant{}, &driver.HeldError{Name: req.Name}
	}
	return g, err
}

func (q *flawedQueue) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind != driver.Exclusive {
		return q.Backend.Await(ctx, c, max)
	}
	switch {
	case q.f.awaitIgnoresCtx:
		time.Sleep(max)
		return nil
	case q.f.dropsEarlyWake:
		// Forget what arrived before this call, then wait.
		_ = q.Backend.Await(ctx, c, 0)
		return q.Backend.Await(ctx, c, max)
	case q.f.noWakeOnRelease:
		return sleepAwait(ctx, max)
	case q.f.pollsSlowly:
		return sleepAwait(ctx, min(max, slowPoll))
	}
	return q.Backend.Await(ctx, c, max)
}

func (q *flawedQueue) Leave(ctx context.Context, c driver.Claim) error {
	if q.f.leaveIgnored && c.Kind == driver.Exclusive {
		return nil
	}
	return q.Backend.Leave(ctx, c)
}

// lifoQueue serves its waiters newest first: each name's waiters form a
// stack, and only its top may take the free lock. It polls (Await returns
// within 5ms), so only its order is wrong.
type lifoQueue struct {
	driver.Backend
	mu     sync.Mutex
	stacks map[string][]string
}

func (q *lifoQueue) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if !inLine(req) {
		return q.Backend.Acquire(ctx, req)
	}
	name, owner := req.Name, req.Owner
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stacks[name]
	if !slices.Contains(st, owner) {
		st = append(st, owner)
	}
	if st[len(st)-1] == owner {
		req.Place = 0
		g, err := q.Backend.Acquire(ctx, req)
		if err == nil {
			st = st[:len(st)-1]
		}
		q.stacks[name] = st
		return g, err
	}
	q.stacks[name] = st
	return driver.Grant{}, &driver.HeldError{Name: name}
}

func (q *lifoQueue) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind != driver.Exclusive {
		return q.Backend.Await(ctx, c, max)
	}
	t := time.NewTimer(min(max, 5*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *lifoQueue) Leave(ctx context.Context, c driver.Claim) error {
	if c.Kind != driver.Exclusive {
		return q.Backend.Leave(ctx, c)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stacks[c.Name] = slices.DeleteFunc(q.stacks[c.Name], func(o string) bool { return o == c.Owner })
	return nil
}

// noQueue keeps no line: an Acquire with a place is taken as one without
// (it barges, and nobody is ahead of anyone), and Await has no wake-up to
// wait for, so a waiter only asks again when its wait runs out.
type noQueue struct{ driver.Backend }

func (q noQueue) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if inLine(req) {
		req.Place = 0
	}
	return q.Backend.Acquire(ctx, req)
}

func (q noQueue) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	if c.Kind != driver.Exclusive {
		return q.Backend.Await(ctx, c, max)
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func queueCheck(t *testing.T, name string) drivertest.Check {
	t.Helper()
	for _, c := range allChecks() {
		if c.Name == name && strings.HasPrefix(name, "Queue") {
			return c
		}
	}
	t.Fatalf("no queue check named %q", name)
	return drivertest.Check{}
}

// TestQueueChecksCatchFlaws shows that every queue check fails on a
// backend that breaks its rule: each flaw is caught by the check named.
func TestQueueChecksCatchFlaws(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flaw    string
		check   string
		backend driver.Backend
	}{
		{"lifo", "QueueServesInArrivalOrder", &lifoQueue{Backend: memory.NewBackend(), stacks: map[string][]string{}}},
		{"noWakeOnRelease", "QueueServesInArrivalOrder", &flawedQueue{memory.NewBackend(), queueFlaws{noWakeOnRelease: true}}},
		{"noExpiryTTL", "QueueWakesAtHolderExpiry", &flawedQueue{memory.NewBackend(), queueFlaws{noExpiryTTL: true}}},
		{"placesNeverExpire", "QueueSkipsDeadWaiter", &flawedQueue{memory.NewBackend(), queueFlaws{placesNeverExpire: true}}},
		{"placesNeverExpire/inspect", "QueueInspectReportsWaiting", &flawedQueue{memory.NewBackend(), queueFlaws{placesNeverExpire: true}}},
		{"leaveIgnored", "QueueSkipsCancelledWaiter", &flawedQueue{memory.NewBackend(), queueFlaws{leaveIgnored: true}}},
		{"leaveIgnored/inspect", "QueueInspectReportsWaiting", &flawedQueue{memory.NewBackend(), queueFlaws{leaveIgnored: true}}},
		{"awaitIgnoresCtx", "QueueAwaitHonoursContext", &flawedQueue{memory.NewBackend(), queueFlaws{awaitIgnoresCtx: true}}},
		{"leaveIgnored/wake", "QueueLeaveWakesNext", &flawedQueue{memory.NewBackend(), queueFlaws{leaveIgnored: true}}},
		{"dropsEarlyWake", "QueueKeepsEarlyWakeUp", &flawedQueue{memory.NewBackend(), queueFlaws{dropsEarlyWake: true}}},
		{"noWakeOnRelease/beforeRenewal", "QueueWakesBeforeRenewal", &flawedQueue{memory.NewBackend(), queueFlaws{noWakeOnRelease: true}}},
		{"pollsSlowly", "QueueWakesBeforeRenewal", &flawedQueue{memory.NewBackend(), queueFlaws{pollsSlowly: true}}},
		{"noQueue", "QueueServesInArrivalOrder", noQueue{memory.NewBackend()}},
		{"noWaiting", "QueueInspectReportsWaiting", noWaiting{memory.NewBackend()}},
	}
	for _, tc := range cases {
		t.Run(tc.flaw, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), drivertest.Timeout)
			defer cancel()
			err := queueCheck(t, tc.check).Run(ctx, tc.backend, drivertest.Namespace())
			if err == nil {
				t.Fatalf("%s passed on a backend with the flaw %s", tc.check, tc.flaw)
			}
			t.Logf("caught: %v", err)
		})
	}
}

// noWaiting reports nobody in line for a lock, as Inspect did before it
// reported Waiting for locks too.
type noWaiting struct{ driver.Backend }

func (b noWaiting) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	info, err := b.Backend.Inspect(ctx, name, kind)
	if kind == driver.Exclusive {
		info.Waiting = 0
	}
	return info, err
}

// TestQueueChecksPassOnMemory runs the queue checks on their own, on a
// fresh correct backend each, and through the flawed wrapper with no flaw
// set (so that the wrapper itself is shown correct).
func TestQueueChecksPassOnMemory(t *testing.T) {
	t.Parallel()
	for _, c := range checksNamed("Queue") {
		for _, b := range []driver.Backend{memory.NewBackend(), &flawedQueue{Backend: memory.NewBackend()}} {
			if err := runCheck(c, b); err != nil {
				t.Errorf("%s on %T: %v", c.Name, b, err)
			}
		}
	}
}
