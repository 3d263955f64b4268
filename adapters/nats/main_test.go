package nats_test

import (
	"context"
	"os"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
)

// TestMain builds the nats-server binary first (a cold build takes minutes,
// which done here does not count against a test's time; a failed build is
// reported by the tests that need a server), and stops the servers the
// package's tests shared when they are done.
func TestMain(m *testing.M) {
	natstest.BuildFirst()
	code := m.Run()
	natstest.StopShared()
	os.Exit(code)
}

// topology is a server set the suites run on, with the bucket's
// replication factor.
type topology struct {
	name     string
	cluster  func(testing.TB) *natstest.Cluster
	replicas int
}

var topologies = []topology{
	{"Single", natstest.Single, 1},
	{"R3", natstest.Triple, 3},
}

// newStore returns a Store in bucket under a prefix of t's own.
func newStore(t testing.TB, js jetstream.JetStream, bucket string) *fencenats.Store {
	t.Helper()
	s, err := fencenats.NewStore(context.Background(), js, bucket, &fencenats.StoreOptions{Prefix: testkit.Namespace(t)})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return s
}

// newBackend returns a Backend in bucket under a prefix of t's own.
func newBackend(t testing.TB, js jetstream.JetStream, bucket string) *fencenats.Backend {
	t.Helper()
	b, err := fencenats.NewBackend(context.Background(), js, bucket, &fencenats.BackendOptions{Prefix: testkit.Namespace(t)})
	if err != nil {
		t.Fatalf("NewBackend: %v", err)
	}
	return b
}
