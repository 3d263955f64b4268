package memory_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
)

func TestStoreConformance(t *testing.T) {
	fencetest.Run(t, func(*testing.T) fence.Store { return memory.NewStore() })
}

func TestSharedStoreConformance(t *testing.T) {
	shared := memory.NewStore()
	fencetest.Run(t, func(*testing.T) fence.Store { return shared })
}
