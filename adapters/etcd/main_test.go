package etcd_test

import (
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestMain stops the cluster that the package's tests share (started on
// first use by etcdtest.Endpoints) when they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	etcdtest.StopShared()
	os.Exit(code)
}

// sharedClient returns a client of the shared cluster, closed when t ends.
func sharedClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return client(t, etcdtest.Endpoints(t))
}

func client(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := etcdtest.NewClient(endpoints)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefix returns a key prefix of t's own.
func prefix(t testing.TB) string {
	t.Helper()
	return testkit.Namespace(t) + "/"
}
