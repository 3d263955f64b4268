package memory_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
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
	locktest.Run(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}

func TestSharedBackendConformance(t *testing.T) {
	shared := memory.NewBackend()
	locktest.Run(t, func(*testing.T) lock.Backend { return shared })
}

func TestStoreLinearizable(t *testing.T) {
	fencetest.Linearizable(t, memory.NewStore(), nil)
}

func TestBackendMonotonic(t *testing.T) {
	locktest.Monotonic(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}

func TestBackendMetadata(t *testing.T) {
	locktest.RunMetadata(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}
