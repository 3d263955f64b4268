package memory_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestElection runs the election checks on one shared in-process backend
// and store, as a real server would be shared.
func TestElection(t *testing.T) {
	b, s := memory.NewBackend(), memory.NewStore()
	drivertest.RunElection(t,
		func(*testing.T) driver.Backend { return b },
		func(*testing.T) fence.Store { return s })
}
