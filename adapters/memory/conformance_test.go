package memory_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// Both suites run on a fresh instance per check and on one instance shared
// by every check (as a real server would be).

func TestStoreConformance(t *testing.T) {
	fencetest.Run(t, func(*testing.T) fence.Store { return memory.NewStore() })
}

func TestSharedStoreConformance(t *testing.T) {
	shared := memory.NewStore()
	fencetest.Run(t, func(*testing.T) fence.Store { return shared })
}

func TestBackendConformance(t *testing.T) {
	drivertest.Run(t, func(*testing.T) driver.Backend { return memory.NewBackend() })
}

func TestSharedBackendConformance(t *testing.T) {
	shared := memory.NewBackend()
	drivertest.Run(t, func(*testing.T) driver.Backend { return shared })
}

func TestStoreLinearizable(t *testing.T) {
	fencetest.Linearizable(t, memory.NewStore(), nil)
}
