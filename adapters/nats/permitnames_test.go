package nats_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
)

// TestPermitNames: PermitNames names the semaphores and read-write locks
// under a prefix, for fencectl; a freed name's state may stay.
func TestPermitNames(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	b := newBackend(t, js, natstest.Bucket(t, js, 1))
	fencectltest.PermitNames(t, b, b.PermitNames, true)
}
