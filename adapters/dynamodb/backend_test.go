package dynamodb_test

import (
	"testing"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/adapters/dynamodb/internal/dynalitetest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// newBackend returns a Backend on the shared server under a prefix of t's
// own, with the SDK's default client options.
func newBackend(t *testing.T, srv *dynalitetest.Server, opts *fenceddb.BackendOptions) *fenceddb.Backend {
	t.Helper()
	var o fenceddb.BackendOptions
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = testkit.Namespace(t) + "/"
	}
	b, err := fenceddb.NewBackend(srv.Client(), testTable, &o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDriverConformance runs the driver contract's suite on dynalite.
func TestDriverConformance(t *testing.T) {
	srv := server(t)
	drivertest.Run(t, func(t *testing.T) driver.Backend { return newBackend(t, srv, nil) })
}
