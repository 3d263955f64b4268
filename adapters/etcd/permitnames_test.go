package etcd_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
)

// TestPermitNames: PermitNames names the semaphores and read-write locks
// in use under a prefix, for fencectl.
func TestPermitNames(t *testing.T) {
	b := etcd.NewBackend(sharedClient(t), &etcd.BackendOptions{Prefix: prefix(t)})
	fencectltest.PermitNames(t, b, b.PermitNames, false)
}
