package locktest_test

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/locktest"
)

// The backend's checks one by one, outside a test: each returns nil when the
// backend meets its obligation. In a test, locktest.Run(t, newBackend) runs
// them all (and the Client's) as subtests.
func ExampleBackendChecks() {
	ctx := context.Background()
	backend := memory.NewBackend()
	var failed []string
	for _, c := range locktest.BackendChecks() {
		if err := c.Run(ctx, backend, locktest.Namespace()); err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	fmt.Println("failed:", failed)
	// Output: failed: []
}
