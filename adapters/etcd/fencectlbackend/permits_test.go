package fencectlbackend

import (
	"strings"
	"testing"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestEtcdPermits: list, inspect and release --force see the permits of a
// semaphore and of a read-write lock (Hardening IV, 5).
func TestEtcdPermits(t *testing.T) {
	eps := etcdtest.Endpoints(t)
	cl, err := etcdtest.NewClient(eps)
	require.NoError(t, err)
	defer cl.Close()
	prefix := testkit.Namespace(t) + "/"
	backend := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: prefix})
	env := map[string]string{"FENCEKIT_ETCD_ENDPOINTS": strings.Join(eps, ",")}
	fencectltest.Permits(t, backend, "jobs/", func(a ...string) (int, string, string) {
		return ctl(t, env, append([]string{"--prefix", prefix}, a...)...)
	})
}
