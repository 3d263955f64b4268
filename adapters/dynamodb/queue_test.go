package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// conflictCounter counts the UpdateItem requests whose condition failed.
type conflictCounter struct {
	fenceddb.API
	updates, conflicts atomic.Int64
}

func (c *conflictCounter) UpdateItem(ctx context.Context, in *awsddb.UpdateItemInput, opts ...func(*awsddb.Options)) (*awsddb.UpdateItemOutput, error) {
	out, err := c.API.UpdateItem(ctx, in, opts...)
	c.updates.Add(1)
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		c.conflicts.Add(1)
	}
	return out, err
}

// Sixteen workers queued on one name through one Backend, as in the
// contention run (issue 35), fault-free: each takes the lock, holds it
// briefly, releases it and queues again. Every worker is served, none
// waits longer than a bound that gives each worker ahead a generous
// cycle, and, because a Backend combines its own writes of an item
// (combine.go), none of its conditional writes fails: its waiters' place
// renewals, the holder's release and the next admission no longer race
// one another on the name's item. Before, about two writes in three
// failed their condition and were tried again, and a run like this one
// served from 2 to 80 acquisitions in 10 s, most waits seconds long.
func TestQueuedWaitersServedOnOneName(t *testing.T) {
	srv := server(t)
	api := &conflictCounter{API: srv.Client()}
	b, err := fenceddb.NewBackend(api, testTable, &fenceddb.BackendOptions{Prefix: testkit.Namespace(t) + "/"})
	if err != nil {
		t.Fatal(err)
	}
	const (
		workers = 16
		ttl     = 500 * time.Millisecond
		hold    = 20 * time.Millisecond
		run     = 6 * time.Second
		// bound: each worker ahead takes its hold and up to 250 ms of
		// round trips on a loaded machine under the race detector.
		bound = workers * (hold + 250*time.Millisecond)
	)
	client := lock.New(b, &lock.Options{
		MinBackoff: time.Millisecond, MaxBackoff: ttl / 4,
		Queue: lock.QueueOptions{PlaceTTL: time.Second},
	})
	ctx := testkit.Context(t)
	runCtx, cancel := context.WithTimeout(ctx, run)
	defer cancel()
	var (
		mu      sync.Mutex
		served  [workers]int
		longest time.Duration
		first   string
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				from := time.Now()
				l, err := client.Acquire(runCtx, "one", ttl)
				waited := time.Since(from)
				mu.Lock()
				if waited > longest {
					longest = waited
					first = fmt.Sprintf("worker %d waited %v from %v (granted: %v)", w, waited.Round(time.Millisecond), from.Format("15:04:05.000"), err == nil)
				}
				if err == nil {
					served[w]++
				}
				mu.Unlock()
				if err != nil {
					if runCtx.Err() == nil {
						t.Errorf("worker %d: %v", w, err)
					}
					return
				}
				time.Sleep(hold)
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				if err := l.Release(rctx); err != nil {
					t.Errorf("worker %d: release: %v", w, err)
				}
				rcancel()
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range served {
		total += n
	}
	t.Logf("%d acquisitions in %v, per worker %v; longest wait %v (bound %v); %d of %d conditional writes failed",
		total, run, served, longest.Round(time.Millisecond), bound, api.conflicts.Load(), api.updates.Load())
	for w, n := range served {
		if n == 0 {
			t.Errorf("worker %d was never served", w)
		}
	}
	if longest > bound {
		t.Errorf("longest wait over the bound %v: %s", bound, first)
	}
	if n := api.conflicts.Load(); n > 0 {
		t.Errorf("%d of the Backend's %d conditional writes failed: its own calls raced one another on the item", n, api.updates.Load())
	}
}
