package lab

import (
	"context"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

func init() {
	RegisterBackend("memory", func(context.Context) (driver.Backend, fence.Store, func(), error) {
		return memory.NewBackend(), memory.NewStore(), func() {}, nil
	})
}
