package driver_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// counting is a wrapper around a backend: it embeds the driver.Backend it
// wraps and overrides one method, Acquire, to count the calls. Every other
// method is the wrapped backend's, and every shape goes through Acquire as
// data, so the wrapper keeps every capability of what it wraps.
type counting struct {
	driver.Backend
	acquires atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	c.acquires.Add(1)
	return c.Backend.Acquire(ctx, req)
}

// A wrapper that counts Acquire calls, under a Client that takes a lock, a
// semaphore's permit, a read-write lock's read permit and a set of locks
// through it: one Acquire each.
func ExampleBackend() {
	ctx := context.Background()
	backend := &counting{Backend: memory.NewBackend()}
	locks := lock.New(backend, nil)

	job, err := locks.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer job.Release(ctx)
	permit, err := locks.Semaphore("workers", 3).TryAcquire(ctx, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer permit.Release(ctx)
	read, err := locks.RWLock("config").TryAcquireRead(ctx, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer read.Release(ctx)
	set, err := locks.TryAcquireMulti(ctx, []string{"invoice/1", "invoice/2"}, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Release(ctx)

	fmt.Println("lock token:", job.Token())
	fmt.Println("semaphore permit token:", permit.Token())
	fmt.Println("read permit token:", read.Token())
	fmt.Println("set tokens:", set.Token("invoice/1"), set.Token("invoice/2"))
	fmt.Println("Acquire calls:", backend.acquires.Load())
	// Output:
	// lock token: 1
	// semaphore permit token: 1
	// read permit token: 1
	// set tokens: 1 1
	// Acquire calls: 4
}

// shapes notes the shapes of the requests that reach the backend it wraps.
type shapes struct {
	driver.Backend
	mu   sync.Mutex
	seen map[string]bool
}

func (s *shapes) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	shape := req.Kind.String()
	switch {
	case req.Names != nil:
		shape = "set"
	case req.Resume:
		shape = "resume"
	case req.Place > 0:
		shape += " in line"
	}
	s.mu.Lock()
	s.seen[shape] = true
	s.mu.Unlock()
	return s.Backend.Acquire(ctx, req)
}

// TestWrapperKeepsEveryCapability runs the whole conformance suite through
// the counting wrapper of the example: it passes, and every shape reaches
// the backend under it.
func TestWrapperKeepsEveryCapability(t *testing.T) {
	under := &shapes{Backend: memory.NewBackend(), seen: map[string]bool{}}
	wrapper := &counting{Backend: under}
	drivertest.Run(t, func(*testing.T) driver.Backend { return wrapper })
	if wrapper.acquires.Load() == 0 {
		t.Error("the suite made no Acquire through the wrapper")
	}
	for _, shape := range []string{"exclusive", "exclusive in line", "set", "resume", "semaphore", "semaphore in line", "read", "read in line", "write", "write in line"} {
		if !under.seen[shape] {
			t.Errorf("no request of shape %q went through the wrapper", shape)
		}
	}
}
