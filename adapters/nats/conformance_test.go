package nats_test

import (
	"testing"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestConformance runs the Store's suite and its linearizability check, the
// driver suite (every shape, holder metadata and token monotonicity; sets
// through the Client's one-by-one path, as the Backend answers
// driver.ErrNotAtomic; TTLs judged to the server's whole seconds,
// Granularity) and the election checks on a single node and on a
// three-node cluster with an R3 bucket, each check under a prefix of its
// own. The suites run one after the other: in parallel they load a two-core
// machine enough to stretch round trips past the short TTLs the checks use.
func TestConformance(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.cluster(t)
			_, js := natstest.Connect(t, c.URLs())
			bucket := natstest.Bucket(t, js, top.replicas)
			store := func(t *testing.T) fence.Store { return newStore(t, js, bucket) }
			backend := func(t *testing.T) driver.Backend { return newBackend(t, js, bucket) }
			t.Run("Store", func(t *testing.T) { fencetest.Run(t, store) })
			t.Run("Linearizable", func(t *testing.T) { fencetest.Linearizable(t, store(t), nil) })
			t.Run("Backend", func(t *testing.T) { drivertest.Run(t, backend, drivertest.TTLGranularity(fencenats.Granularity)) })
			t.Run("Election", func(t *testing.T) { drivertest.RunElection(t, backend, store) })
		})
	}
}
