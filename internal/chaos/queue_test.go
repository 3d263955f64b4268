package chaos

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
)

// nameByName is a backend that cannot take a set of names in one step: it
// answers every set with driver.ErrNotAtomic, having changed nothing, so
// that the Client takes the names one by one in sorted order.
type nameByName struct{ driver.Backend }

func (b nameByName) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, driver.ErrNotAtomic
	}
	return b.Backend.Acquire(ctx, req)
}

// countingQueue is the memory backend counting its Acquire calls that keep
// a place in line.
type countingQueue struct {
	*memory.Backend
	enqueues *atomic.Int64
}

func (c countingQueue) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Place > 0 {
		c.enqueues.Add(1)
	}
	return c.Backend.Acquire(ctx, req)
}

// TestRunWaitsInLine: the workers wait in line (their Client.Acquire asks
// with a place in line, which the recording wrapper must pass on), and the
// checker stays clean.
func TestRunWaitsInLine(t *testing.T) {
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
		t.Fatalf("%d Acquire calls with a place, %d acquisitions: the workers did not wait in line\n%s", n.Load(), rep.Acquisitions, out.String())
	}
	if rep.Regressions != 0 {
		t.Fatalf("%d token regressions\n%s", rep.Regressions, out.String())
	}
	t.Logf("%d Acquire calls with a place for %d acquisitions", n.Load(), rep.Acquisitions)
}
