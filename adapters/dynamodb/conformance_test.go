package dynamodb_test

import (
	"context"
	"os"
	"testing"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(dynalitetest.Main(m)) }

// testTable is the table every test of this package uses, made once per
// server by Migrate; tests keep apart by prefix.
const testTable = "fencekit_test"

// server returns the shared server with the test table made.
func server(t testing.TB) *dynalitetest.Server {
	t.Helper()
	srv := dynalitetest.Shared(t)
	if err := fenceddb.Migrate(context.Background(), srv.Client(), testTable); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return srv
}

// newStore returns a Store on the shared server under a prefix of t's own,
// with the SDK's default client options.
func newStore(t *testing.T, srv *dynalitetest.Server) *fenceddb.Store {
	t.Helper()
	s, err := fenceddb.NewStore(srv.Client(), testTable, &fenceddb.StoreOptions{Prefix: testkit.Namespace(t) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the Store conformance suite on dynalite (or the
// server FENCEKIT_DYNAMODB_URL names).
func TestConformance(t *testing.T) {
	srv := server(t)
	t.Logf("server: %s", srv.Name)
	fencetest.Run(t, func(t *testing.T) fence.Store { return newStore(t, srv) })
}

// TestLinearizable runs the linearizability kit on the server: concurrent
// writers with overlapping tokens on a few keys, some calls interrupted,
// every history checked against the fenced register.
func TestLinearizable(t *testing.T) {
	srv := server(t)
	fencetest.Linearizable(t, newStore(t, srv), nil)
}
