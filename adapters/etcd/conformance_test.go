package etcd_test

import (
	"testing"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// TestConformance runs both suites, and the election checks, on the shared
// three-member cluster, each check under a prefix of its own. The suites run one after the other: in
// parallel they load a two-core machine enough to stretch etcd's round trips
// past the short TTLs the checks use.
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
	newBackend := func(t *testing.T) lock.Backend {
		return fenceetcd.NewBackend(c, &fenceetcd.BackendOptions{Prefix: prefix(t)})
	}
	t.Run("Backend", func(t *testing.T) {
		locktest.Run(t, newBackend)
	})
	t.Run("Monotonic", func(t *testing.T) {
		locktest.Monotonic(t, newBackend)
	})
	t.Run("Metadata", func(t *testing.T) {
		locktest.RunMetadata(t, newBackend)
	})
	t.Run("Election", func(t *testing.T) {
		locktest.RunElection(t, newBackend, func(t *testing.T) fence.Store {
			return fenceetcd.NewStore(c, &fenceetcd.StoreOptions{Prefix: prefix(t)})
		})
	})
}
