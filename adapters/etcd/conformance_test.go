package etcd_test

import (
	"testing"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// TestConformance runs the Store's suite, every check of the driver
// contract (drivertest.Run: locks, the Client, bad input, metadata, queued
// waiting, sets, resume, permits and token monotonicity, with TTLs judged to
// etcd's whole seconds, Granularity) and the election
// checks on the shared three-member cluster, each check under a prefix of
// its own. The suites run one after the other: in parallel they load a
// two-core machine enough to stretch etcd's round trips past the short
// TTLs the checks use.
func TestConformance(t *testing.T) {
	c := sharedClient(t)
	t.Run("Store", func(t *testing.T) {
		fencetest.Run(t, func(t *testing.T) fence.Store {
			return fenceetcd.NewStore(c, &fenceetcd.StoreOptions{Prefix: prefix(t)})
		})
	})
	t.Run("Linearizable", func(t *testing.T) {
		fencetest.Linearizable(t, fenceetcd.NewStore(c, &fenceetcd.StoreOptions{Prefix: prefix(t)}), nil)
	})
	newBackend := func(t *testing.T) driver.Backend {
		return fenceetcd.NewBackend(c, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	}
	t.Run("Backend", func(t *testing.T) {
		drivertest.Run(t, newBackend, drivertest.TTLGranularity(fenceetcd.Granularity))
	})
	t.Run("Election", func(t *testing.T) {
		drivertest.RunElection(t, newBackend, func(t *testing.T) fence.Store {
			return fenceetcd.NewStore(c, &fenceetcd.StoreOptions{Prefix: prefix(t)})
		})
	})
}
