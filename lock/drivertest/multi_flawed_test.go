package drivertest_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// multiFlaws are realistic bugs of a one-step set acquire, one per field,
// each on top of the correct memory backend.
type multiFlaws struct {
	partial    bool // takes the names one by one and keeps what it took when one is busy
	setCounter bool // mints the set's tokens from a counter of its own, not each name's
	retryMints bool // a same-owner retry mints new tokens instead of extending
}

// flawedMulti breaks the Acquire of a set (Request.Names) and passes every
// other request to the memory backend it embeds.
type flawedMulti struct {
	driver.Backend
	f multiFlaws

	mu   sync.Mutex
	next fence.Token
}

func (m *flawedMulti) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names == nil {
		return m.Backend.Acquire(ctx, req)
	}
	switch {
	case m.f.partial:
		tokens := make([]fence.Token, len(req.Names))
		for i, n := range req.Names {
			one := req
			one.Names, one.Name = nil, n
			g, err := m.Backend.Acquire(ctx, one)
			if err != nil {
				return driver.Grant{}, err
			}
			tokens[i] = g.Token
		}
		return driver.Grant{Tokens: tokens}, nil
	case m.f.retryMints:
		for _, n := range req.Names {
			_ = m.Backend.Release(ctx, driver.Claim{Name: n, Owner: req.Owner, Kind: driver.Exclusive})
		}
	}
	g, err := m.Backend.Acquire(ctx, req)
	if err == nil && m.f.setCounter {
		m.mu.Lock()
		m.next++
		for i := range g.Tokens {
			g.Tokens[i] = m.next
		}
		m.mu.Unlock()
	}
	return g, err
}

// TestMultiChecksCatchFlaws shows that each flaw fails the checks named for
// it, and that the correct backend passes them.
func TestMultiChecksCatchFlaws(t *testing.T) {
	checks := map[string]drivertest.Check{}
	for _, c := range checksNamed("Multi/") {
		checks[c.Name] = c
	}
	cases := []struct {
		name   string
		f      multiFlaws
		caught []string // checks that must fail
	}{
		{"correct", multiFlaws{}, nil},
		{"partial", multiFlaws{partial: true}, []string{"Multi/SetAllOrNothing", "Multi/MultiAllOrNothing"}},
		{"setCounter", multiFlaws{setCounter: true}, []string{"Multi/SetAllOrNothing", "Multi/MultiTokensRisePerName"}},
		{"retryMints", multiFlaws{retryMints: true}, []string{"Multi/SetAllOrNothing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names := tc.caught
			if names == nil {
				names = []string{"Multi/SetAllOrNothing", "Multi/MultiAllOrNothing", "Multi/MultiTokensRisePerName", "Multi/MultiWaiterHoldsNothing", "Multi/MultiOpposedOrdersBothFinish"}
			}
			runOnFlawed(t, checks, names, tc.caught != nil, tc.name, func() driver.Backend {
				return &flawedMulti{Backend: memory.NewBackend(), f: tc.f}
			})
		})
	}
}

// TestInOrderPathsHideOnlySets: the multi checks' in-order paths go
// through a backend that answers driver.ErrNotAtomic to every set and
// changes nothing, while every other request reaches the backend: a
// backend whose sets are broken passes them, since the Client never sends
// it a set there, and one that answers ErrNotAtomic itself passes them all.
func TestInOrderPathsHideOnlySets(t *testing.T) {
	checks := map[string]drivertest.Check{}
	var inOrder []string
	for _, c := range checksNamed("Multi/") {
		checks[c.Name] = c
		if !strings.HasPrefix(c.Name, "Multi/InOrder/") && !strings.HasPrefix(c.Name, "Multi/Polling/") {
			continue
		}
		inOrder = append(inOrder, c.Name)
	}
	if len(inOrder) < 16 {
		t.Fatalf("%d checks of the in-order paths; want the multi checks twice", len(inOrder))
	}
	runOnFlawed(t, checks, inOrder, false, "partial", func() driver.Backend {
		return &flawedMulti{Backend: memory.NewBackend(), f: multiFlaws{partial: true, setCounter: true}}
	})
	runOnFlawed(t, checks, slices.Collect(maps.Keys(checks)), false, "none: sets not atomic", func() driver.Backend {
		return setsNotAtomic{memory.NewBackend()}
	})
}

// setsNotAtomic is a correct backend that takes no set in one step.
type setsNotAtomic struct{ driver.Backend }

func (b setsNotAtomic) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, driver.ErrNotAtomic
	}
	return b.Backend.Acquire(ctx, req)
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
