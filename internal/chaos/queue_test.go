package chaos

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// polling hides a backend's queued waiting. The fakes that break Acquire
// wrap the memory backend, whose AcquireOrEnqueue a queued Client would
// call instead, bypassing the fault they inject.
type polling struct{ lock.Backend }

// countingQueue is the memory backend counting its AcquireOrEnqueue calls.
type countingQueue struct {
	*memory.Backend
	enqueues *atomic.Int64
}

func (c countingQueue) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, place time.Duration) (fence.Token, error) {
	c.enqueues.Add(1)
	return c.Backend.AcquireOrEnqueue(ctx, name, owner, ttl, place)
}

// TestRunQueuesOnAQueueBackend: on a backend with queued waiting the
// workers wait in line (their Client.Acquire goes through AcquireOrEnqueue,
// which the recording wrapper must not hide), and the checker stays clean.
func TestRunQueuesOnAQueueBackend(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	rep, err := Run(context.Background(), Config{
		Name: "memory-queued", Backend: countingQueue{memory.NewBackend(), &n}, Store: memory.NewStore(),
		Workers: 5, Keys: 1, Duration: time.Second, TTL: 30 * time.Millisecond, Seed: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.Print(&out)
	if !rep.OK() {
		t.Fatalf("violations on a queued run:\n%s", out.String())
	}
	if n.Load() == 0 || rep.Acquisitions == 0 {
		t.Fatalf("%d AcquireOrEnqueue calls, %d acquisitions: the workers did not wait in line\n%s", n.Load(), rep.Acquisitions, out.String())
	}
	if rep.Regressions != 0 {
		t.Fatalf("%d token regressions\n%s", rep.Regressions, out.String())
	}
	t.Logf("%d AcquireOrEnqueue calls for %d acquisitions", n.Load(), rep.Acquisitions)
}
