package memory_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

func TestBackendConformance(t *testing.T) {
	locktest.Run(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}

func TestSharedBackendConformance(t *testing.T) {
	shared := memory.NewBackend()
	locktest.Run(t, func(*testing.T) lock.Backend { return shared })
}
