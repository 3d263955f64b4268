package locktest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// multiFlaws are realistic bugs of a one-step multi-name acquire, one per
// field, each on top of the correct memory.Backend.
type multiFlaws struct {
	partial    bool // takes the names one by one and keeps what it took when one is busy
	setCounter bool // mints the set's tokens from a counter of its own, not each name's
	retryMints bool // a same-owner retry mints new tokens instead of extending
}

type flawedMulti struct {
	*memory.Backend
	f multiFlaws

	mu   sync.Mutex
	next fence.Token
}

func (m *flawedMulti) AcquireMulti(ctx context.Context, names []string, owner string, ttl time.Duration) ([]fence.Token, error) {
	switch {
	case m.f.partial:
		tokens := make([]fence.Token, len(names))
		for i, n := range names {
			tok, err := m.Backend.Acquire(ctx, n, owner, ttl)
			if err != nil {
				return nil, err
			}
			tokens[i] = tok
		}
		return tokens, nil
	case m.f.retryMints:
		for _, n := range names {
			_ = m.Backend.Release(ctx, n, owner)
		}
	}
	tokens, err := m.Backend.AcquireMulti(ctx, names, owner, ttl)
	if err == nil && m.f.setCounter {
		m.mu.Lock()
		m.next++
		for i := range tokens {
			tokens[i] = m.next
		}
		m.mu.Unlock()
	}
	return tokens, err
}

// TestMultiChecksCatchFlaws shows that each flaw fails the checks named for
// it, and that the correct backend passes them.
func TestMultiChecksCatchFlaws(t *testing.T) {
	checks := map[string]locktest.Check{}
	for _, c := range append(locktest.MultiChecks(), locktest.MultiBackendChecks()...) {
		checks[c.Name] = c
	}
	cases := []struct {
		name   string
		f      multiFlaws
		caught []string // checks that must fail
	}{
		{"correct", multiFlaws{}, nil},
		{"partial", multiFlaws{partial: true}, []string{"AcquireMultiAllOrNothing", "MultiAllOrNothing"}},
		{"setCounter", multiFlaws{setCounter: true}, []string{"AcquireMultiAllOrNothing", "MultiTokensRisePerName"}},
		{"retryMints", multiFlaws{retryMints: true}, []string{"AcquireMultiAllOrNothing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names := tc.caught
			if names == nil {
				names = []string{"AcquireMultiAllOrNothing", "MultiAllOrNothing", "MultiTokensRisePerName", "MultiWaiterHoldsNothing", "MultiOpposedOrdersBothFinish"}
			}
			runOnFlawed(t, checks, names, tc.caught != nil, tc.name, func() lock.Backend {
				return &flawedMulti{Backend: memory.NewBackend(), f: tc.f}
			})
		})
	}
}

// TestWithoutMultiHidesCapability: the wrappers RunMulti uses to check the
// in-order and polling paths hide what they say.
func TestWithoutMultiHidesCapability(t *testing.T) {
	b := memory.NewBackend()
	if _, ok := locktest.WithoutMulti(b).(lock.MultiBackend); ok {
		t.Error("WithoutMulti kept lock.MultiBackend")
	}
	if _, ok := locktest.WithoutMulti(b).(lock.QueueBackend); !ok {
		t.Error("WithoutMulti dropped lock.QueueBackend")
	}
	if _, ok := locktest.BaseOnly(b).(lock.QueueBackend); ok {
		t.Error("BaseOnly kept lock.QueueBackend")
	}
	if _, ok := locktest.BaseOnly(b).(lock.MultiBackend); ok {
		t.Error("BaseOnly kept lock.MultiBackend")
	}
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
