package etcdtest

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit"
)

// EndpointsEnv names the environment variable with the comma-separated
// client URLs of an etcd cluster that tests may use (not for fault tests).
const EndpointsEnv = "FENCEKIT_ETCD_ENDPOINTS"

var shared struct {
	once sync.Once
	c    *Cluster
	dir  string
	eps  []string
	err  error
}

// Endpoints returns the endpoints of the cluster that a package's tests
// share: FENCEKIT_ETCD_ENDPOINTS when set, else one embedded three-member
// cluster started on first use and stopped by StopShared (call it from
// TestMain). When no cluster can be had, t is skipped, or failed under
// FENCEKIT_REQUIRE_BACKENDS=1.
func Endpoints(t testing.TB) []string {
	t.Helper()
	eps, err := SharedEndpoints()
	if err != nil {
		testkit.Unavailable(t, "etcd", "the embedded three-member cluster did not start ("+err.Error()+"); set "+EndpointsEnv)
	}
	return eps
}

// SharedEndpoints is Endpoints for code without a testing.TB (TestMain,
// examples): the error says why there is no cluster.
func SharedEndpoints() ([]string, error) {
	shared.once.Do(func() {
		if env := strings.TrimSpace(os.Getenv(EndpointsEnv)); env != "" {
			shared.eps = strings.Split(env, ",")
			return
		}
		shared.dir, shared.err = os.MkdirTemp("", "fencekit-etcd-")
		if shared.err != nil {
			return
		}
		shared.c, shared.err = Start(shared.dir)
		if shared.err == nil {
			shared.eps = shared.c.Endpoints()
		}
	})
	return shared.eps, shared.err
}

// StopShared stops the shared cluster, if one was started, and removes its
// data and the member command built for this process. Call it from TestMain
// after m.Run, when no test's cluster runs any more.
func StopShared() {
	if shared.c != nil {
		shared.c.Close()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	if build.path != "" {
		_ = os.RemoveAll(filepath.Dir(build.path))
	}
}

// New starts a cluster of t's own, for tests that stop, restart or
// partition members, and stops it when t ends. When it cannot start, t is
// skipped, or failed under FENCEKIT_REQUIRE_BACKENDS=1.
func New(t testing.TB) *Cluster {
	t.Helper()
	c, err := Start(t.TempDir())
	if err != nil {
		testkit.Unavailable(t, "etcd", "the embedded three-member cluster did not start: "+err.Error())
	}
	t.Cleanup(c.Close)
	return c
}
