package s3_test

import (
	"os"
	"testing"

	fences3 "github.com/fencekit/fencekit/adapters/s3"
	"github.com/fencekit/fencekit/adapters/s3/internal/s3server"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
	"github.com/fencekit/fencekit/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(s3server.Main(m)) }

// newStore returns a Store on the shared server under a prefix of t's own.
func newStore(t *testing.T, srv *s3server.Server) *fences3.Store {
	return fences3.NewStore(srv.Client(), srv.Bucket, &fences3.Options{Prefix: testkit.Namespace(t) + "/"})
}

// TestConformance runs the Store conformance suite on the S3 server from
// s3server (versitygw unless FENCEKIT_S3_SERVER or FENCEKIT_S3_ENDPOINT
// names another), with the SDK's default options.
func TestConformance(t *testing.T) {
	srv := s3server.Shared(t)
	t.Logf("server: %s", srv.Name)
	fencetest.Run(t, func(t *testing.T) fence.Store { return newStore(t, srv) })
}

// TestLinearizable runs the linearizability kit on the server: concurrent
// writers with overlapping tokens on a few keys, some calls interrupted,
// every history checked against the fenced register.
func TestLinearizable(t *testing.T) {
	srv := s3server.Shared(t)
	fencetest.Linearizable(t, newStore(t, srv), nil)
}
