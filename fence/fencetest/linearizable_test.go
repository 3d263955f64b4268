package fencetest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
)

// TestLinearizableCatches shows that the linearizability check alone fails
// stores that break the fenced register, each in every one of several runs.
func TestLinearizableCatches(t *testing.T) {
	byName := map[string]func() fence.Store{}
	for _, b := range gallery() {
		byName[b.name] = b.store
	}
	for _, name := range []string{
		"Put checks, yields, then writes",
		"Advance checks, yields, then writes",
		"Delete drops the fence",
		"Delete does not check the token",
		"Advance lowers the fence (no check)",
		"Advance removes the value",
		"refuses equal tokens on Put",
		"compares as float64 (Lua, JSON)", // only if tokens cross 2^53: they do not
	} {
		newStore, ok := byName[name]
		if !ok {
			t.Fatalf("no gallery store %q", name)
		}
		t.Run(name, func(t *testing.T) {
			if strings.Contains(name, "float64") {
				// Small tokens compare exactly even as doubles: the
				// linearizability check is no substitute for
				// ExactComparison, and must not fail a store for it.
				if err := fencetest.CheckLinearizable(context.Background(), newStore(), fencetest.Namespace(), nil); err != nil {
					t.Fatalf("a store whose only defect shows above 2^53 failed: %v", err)
				}
				return
			}
			for range 5 {
				if err := fencetest.CheckLinearizable(context.Background(), newStore(), fencetest.Namespace(), nil); err == nil {
					t.Fatalf("the history of a store that %s was found linearizable", name)
				}
			}
		})
	}
}

// TestLinearizableReportsTheCalls shows what a failure says.
func TestLinearizableReportsTheCalls(t *testing.T) {
	s := &store{hooks: hooks{refuse: func(string, fence.Token, fence.Token) bool { return false }}}
	err := fencetest.CheckLinearizable(context.Background(), s, "ns:", &fencetest.LinearizableOptions{Seed: 1, Interrupt: -1})
	if err == nil || !strings.Contains(err.Error(), "not linearizable") || !strings.Contains(err.Error(), " > ") {
		t.Fatalf("error %v; want a report of the calls that no order fits", err)
	}
	t.Log(err)
}

func TestLinearizableMemoryStore(t *testing.T) {
	fencetest.Linearizable(t, memory.NewStore(), nil)
	fencetest.Linearizable(t, memory.NewStore(), &fencetest.LinearizableOptions{Workers: 10, Ops: 40, Keys: 1, Interrupt: 0.5})
}
