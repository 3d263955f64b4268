package fencectlbackend

import (
	"context"
	"strings"
	"testing"
	"time"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/fencectl/fencectltest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestNatsPermits: list, inspect and release --force see the permits of a
// semaphore and of a read-write lock (Hardening IV, 5).
func TestNatsPermits(t *testing.T) {
	urls := natstest.Single(t).URLs()
	_, js := natstest.Connect(t, urls)
	lockBucket := natstest.Bucket(t, js, 1)
	prefix := testkit.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := fencenats.NewBackend(ctx, js, lockBucket, &fencenats.BackendOptions{Prefix: prefix})
	require.NoError(t, err)
	env := map[string]string{"FENCEKIT_NATS_URL": strings.Join(urls, ",")}
	fencectltest.Permits(t, backend, "jobs/", func(a ...string) (int, string, string) {
		return ctl(t, env, append([]string{"--nats-bucket", lockBucket, "--prefix", prefix}, a...)...)
	})
}
