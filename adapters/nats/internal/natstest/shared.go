package natstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/internal/testkit"
)

type sharedCluster struct {
	once sync.Once
	c    *Cluster
	dir  string
	err  error
}

var (
	sharedSingle sharedCluster
	sharedTriple sharedCluster
)

func (s *sharedCluster) get(nodes int) (*Cluster, error) {
	s.once.Do(func() {
		s.dir, s.err = os.MkdirTemp("", "fencekit-nats-")
		if s.err != nil {
			return
		}
		s.c, s.err = Start(s.dir, Config{Nodes: nodes})
	})
	return s.c, s.err
}

func (s *sharedCluster) stop() {
	if s.c != nil {
		s.c.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Single returns the single-node server the package's tests share, started
// on first use. When none can be had, t is skipped (failed under
// FENCEKIT_REQUIRE_BACKENDS=1). Not for tests that stop or kill nodes.
func Single(t testing.TB) *Cluster {
	t.Helper()
	c, err := sharedSingle.get(1)
	if err != nil {
		testkit.Unavailable(t, "nats-server", "the single node did not start ("+err.Error()+"); set "+BinaryEnv+" or let the test build nats-server "+Version)
	}
	return c
}

// Triple returns the three-node cluster the package's tests share.
func Triple(t testing.TB) *Cluster {
	t.Helper()
	c, err := sharedTriple.get(3)
	if err != nil {
		testkit.Unavailable(t, "nats-server", "the three-node cluster did not start ("+err.Error()+"); set "+BinaryEnv+" or let the test build nats-server "+Version)
	}
	return c
}

// StopShared stops the shared servers that were started. Call it from
// TestMain after m.Run.
func StopShared() {
	sharedSingle.stop()
	sharedTriple.stop()
}

// New starts a cluster of t's own, for tests that kill, stop or restart
// nodes, and kills it when t ends.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	c, err := Start(t.TempDir(), cfg)
	if err != nil {
		testkit.Unavailable(t, "nats-server", err.Error())
	}
	t.Cleanup(c.Close)
	return c
}

// Connect returns a connection to urls (and its JetStream), closed when t
// ends. It reconnects for ever, so that a test can restart nodes under it.
func Connect(t testing.TB, urls []string, opts ...natsgo.Option) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]natsgo.Option{natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50 * time.Millisecond)}, opts...)
	url := urls[0]
	for _, u := range urls[1:] {
		url += "," + u
	}
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Bucket creates a KV bucket of its own for t with replicas replicas and
// per-key TTLs allowed (LimitMarkerTTL one second), and returns its name.
// The bucket is deleted when t ends, best effort.
func Bucket(t testing.TB, js jetstream.JetStream, replicas int) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "fk_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for {
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Replicas: replicas, LimitMarkerTTL: time.Second})
		// A cluster just started, or just past a leader change, may
		// answer that JetStream is not available yet.
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("natstest: create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteKeyValue(ctx, name)
	})
	return name
}
