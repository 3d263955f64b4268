package fencetest_test

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence/fencetest"
)

// The checks one by one, outside a test: each returns nil when the store
// meets its obligation. In a test, fencetest.Run(t, newStore) runs them all
// as subtests.
func ExampleChecks() {
	ctx := context.Background()
	store := memory.NewStore()
	var failed []string
	for _, c := range fencetest.Checks() {
		if err := c.Run(ctx, store, fencetest.Namespace()); err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	fmt.Println("failed:", failed)
	// Output: failed: []
}

// A concurrent history of Put, Get, Delete and Advance with overlapping
// tokens, checked against the fenced register. In a test, use
// fencetest.Linearizable(t, store, nil).
func ExampleCheckLinearizable() {
	err := fencetest.CheckLinearizable(context.Background(), memory.NewStore(), fencetest.Namespace(),
		&fencetest.LinearizableOptions{Workers: 4, Ops: 40, Seed: 1})
	fmt.Println("linearizable:", err == nil)
	// Output: linearizable: true
}
