package drivertest_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// The checks one by one, outside a test: each returns nil when the backend
// meets its obligation. Here, those about tokens. In a test,
// drivertest.Run(t, newBackend) runs them all as subtests.
func ExampleChecks() {
	ctx := context.Background()
	backend := memory.NewBackend()
	var failed []string
	for _, c := range drivertest.Checks() {
		if !strings.Contains(c.Name, "Token") {
			continue
		}
		if err := c.Run(ctx, backend, drivertest.Namespace()); err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	fmt.Println("failed:", failed)
	// Output: failed: []
}
