package etcd_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
)

// exampleEndpoints are the shared cluster's, for the examples.
var exampleEndpoints []string

// TestMain starts the cluster that the package's tests share, when the run
// has examples to give it to (tests start it on first use), and stops it
// when they are done. In a waiter process (waiterEnv set) it runs that
// waiter instead. Examples cannot skip themselves, so without a cluster
// they are skipped here with a note, unless FENCEKIT_REQUIRE_BACKENDS=1,
// under which they run and fail.
func TestMain(m *testing.M) {
	if os.Getenv(waiterEnv) != "" {
		// A waiter process of TestWaiterKilled: no cluster of its own.
		os.Exit(queueWaitWorker())
	}
	flag.Parse()
	eps, err := etcdtest.SharedEndpoints()
	if err == nil {
		exampleEndpoints = eps
	} else if os.Getenv(testkit.RequireEnv) != "1" {
		fmt.Fprintf(os.Stderr, "adapters/etcd: examples skipped, no etcd cluster (%v)\n", err)
		skip := "^Example"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
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

// dialClient returns a client of the member at addr that makes every
// connection with dial: through the fault proxy, or plain.
func dialClient(t *testing.T, addr string, dial faultproxy.DialFunc) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return dial(ctx, "tcp", a)
		})},
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}
