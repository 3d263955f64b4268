package nats_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// TestConformance runs both suites, the linearizability check, token
// monotonicity, metadata and the election checks on a single node and on a
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
			backend := func(t *testing.T) lock.Backend { return newBackend(t, js, bucket) }
			t.Run("Store", func(t *testing.T) { fencetest.Run(t, store) })
			t.Run("Linearizable", func(t *testing.T) { fencetest.Linearizable(t, store(t), nil) })
			t.Run("Backend", func(t *testing.T) { locktest.Run(t, backend) })
			t.Run("Monotonic", func(t *testing.T) { locktest.Monotonic(t, backend) })
			t.Run("Metadata", func(t *testing.T) { locktest.RunMetadata(t, backend) })
			t.Run("Election", func(t *testing.T) { locktest.RunElection(t, backend, store) })
		})
	}
}
