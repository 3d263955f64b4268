//go:build unix

package faulttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Waiters under faults (issue 22): a waiter killed with SIGKILL, one whose
// connection is cut, and a server restart with waiters in line. In each,
// the next waiter must be served within the place TTL bound, tokens must
// rise, and no two holders may overlap.

// waiterPlace is the place TTL of the waiters in these scenarios: a waiter
// renews every third of it, so a place outlives its waiter by at most
// waiterPlace, and the waiter behind notices at its next renewal at the
// latest (Redis pushes no wake-up on a place's expiry).
const waiterPlace = 600 * time.Millisecond

// waiterBound is how long after a waiter dies (or is cut off) the next one
// must be served: its place's TTL, then the next renewal of the waiter
// behind, plus a margin for -race on a loaded two-core machine.
const waiterBound = waiterPlace + waiterPlace/3 + 1500*time.Millisecond

func init() {
	workers["queue-wait"] = queueWaitWorker
}

// queueWaitWorker is a worker process that waits in line for a lock
// (Client.Acquire, place TTL from FENCEKIT_FAULTTEST_PLACE) and says
// "queued" once its first attempt was refused; its parent then kills it.
// Should it ever get the lock it says "acquired <token>" and holds on.
func queueWaitWorker() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	place, err := time.ParseDuration(os.Getenv("FENCEKIT_FAULTTEST_PLACE"))
	if err != nil {
		return workerFail("place: %v", err)
	}
	if os.Getenv("FENCEKIT_FAULTTEST_BACKEND") != "redis" {
		return workerFail("unknown backend %q", os.Getenv("FENCEKIT_FAULTTEST_BACKEND"))
	}
	opts, err := goredis.ParseURL(os.Getenv("FENCEKIT_FAULTTEST_URL"))
	if err != nil {
		return workerFail("%v", err)
	}
	c := goredis.NewClient(opts)
	defer c.Close()
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: os.Getenv("FENCEKIT_FAULTTEST_PREFIX")})
	var once sync.Once
	client := lock.New(b, &lock.Options{
		Queue: lock.QueueOptions{PlaceTTL: place},
		Observer: &lock.Observer{Retrying: func(lock.Event) {
			once.Do(func() { fmt.Println("queued") })
		}},
	})
	l, err := client.Acquire(ctx, os.Getenv("FENCEKIT_FAULTTEST_LOCK"), time.Minute)
	if err != nil {
		return workerFail("acquire: %v", err)
	}
	fmt.Printf("acquired %d\n", l.Token())
	<-ctx.Done()
	return 0
}

// holds records every holding of one lock by the waiters of a scenario.
type holds struct {
	mu    sync.Mutex
	spans []span
}

// span is one holding: from Acquire's return to the start of Release.
type span struct {
	who      string
	token    fence.Token
	from, to time.Time
}

func (h *holds) add(s span) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spans = append(h.spans, s)
}

// check fails t unless the holdings, in the order they began, carry
// tokens above floor that strictly rise, and each began after the one
// before it had ended.
func (h *holds) check(t *testing.T, floor fence.Token) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	spans := slices.Clone(h.spans)
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	prev := span{who: "the first holder", token: floor}
	for _, s := range spans {
		if s.token <= prev.token {
			t.Errorf("%s got token %d after %s's %d: tokens must rise", s.who, s.token, prev.who, prev.token)
		}
		if !prev.to.IsZero() && s.from.Before(prev.to) {
			t.Errorf("%s held the lock from %v, before %s released it at %v", s.who, s.from.Format(time.StampMicro), prev.who, prev.to.Format(time.StampMicro))
		}
		prev = s
	}
}

// queuedWaiter is a Client.Acquire in line in the background, releasing as
// soon as it is served.
type queuedWaiter struct {
	who    string
	queued chan struct{} // closed when its first attempt was refused
	done   chan struct{} // closed when Acquire returned (and the lease was released)
	served atomic.Pointer[time.Time]
	err    error
	cancel context.CancelFunc
}

// startQueuedWaiter starts who's Client.Acquire of name on b and returns
// once it is in line, failing t when it is not refused within 10 s.
func startQueuedWaiter(t *testing.T, ctx context.Context, b driver.Backend, name, who string, h *holds) *queuedWaiter {
	t.Helper()
	w := &queuedWaiter{who: who, queued: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	c := lock.New(b, &lock.Options{
		Queue: lock.QueueOptions{PlaceTTL: waiterPlace},
		Observer: &lock.Observer{Retrying: func(lock.Event) {
			once.Do(func() { close(w.queued) })
		}},
	})
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	t.Cleanup(cancel)
	go func() {
		defer close(w.done)
		l, err := c.Acquire(wctx, name, 10*time.Second)
		if err != nil {
			w.err = err
			return
		}
		from := time.Now()
		w.served.Store(&from)
		to := time.Now()
		_ = l.Release(context.WithoutCancel(ctx))
		h.add(span{who: who, token: l.Token(), from: from, to: to})
	}()
	select {
	case <-w.queued:
	case <-w.done:
		t.Fatalf("%s was served at once (%v); want it in line", who, w.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was not refused (in line) within 10s", who)
	}
	return w
}

// servedWithin waits for w to be served and fails t unless it was, within
// bound of since.
func (w *queuedWaiter) servedWithin(t *testing.T, since time.Time, bound time.Duration, after string) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(bound + 10*time.Second):
		t.Fatalf("%s not served within %v of %s", w.who, bound+10*time.Second, after)
	}
	at := w.served.Load()
	if at == nil {
		t.Fatalf("%s: Acquire: %v", w.who, w.err)
	}
	if d := at.Sub(since); d > bound {
		t.Errorf("%s served %v after %s; want within %v (place TTL %v, renewal every %v)", w.who, d, after, bound, waiterPlace, waiterPlace/3)
	} else {
		t.Logf("%s served %v after %s (bound %v)", w.who, d, after, bound)
	}
}

// eachQueueRig runs f on the rigs of memory and Redis, whose faulty path
// (simNet's for memory) carries the waiters' places and wake-ups as every
// other call; the SQL backends' waiters are sql_waiters_test.go's.
func eachQueueRig(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, b := range backends {
		if b.name == "postgres" {
			continue
		}
		t.Run(b.name, func(t *testing.T) { f(t, b.make(t)) })
	}
}

// TestWaiterKilled: the first waiter in line dies (a worker process killed
// with SIGKILL on Redis; on memory, which lives in the test process, a
// waiter that queued once and never came back). When the holder releases,
// the waiter behind the dead one is served within the place TTL bound.
func TestWaiterKilled(t *testing.T) {
	eachQueueRig(t, func(t *testing.T, r *rig) {
		ctx := testCtx(t)
		name := unique(t, "lock")
		h := newOwner(t)
		first, err := acquireLock(ctx, r.direct, name, h, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var kill func()
		if r.child == nil {
			dead := newOwner(t)
			if _, err := enqueue(ctx, r.direct, name, dead, time.Minute, waiterPlace); !isHeld(err) {
				t.Fatalf("the dead waiter's Acquire with a place: %v; want ErrHeld", err)
			}
			kill = func() {}
		} else {
			w := startWorker(t, "queue-wait", map[string]string{
				"FENCEKIT_FAULTTEST_BACKEND": r.child["backend"],
				"FENCEKIT_FAULTTEST_URL":     r.child["url"],
				"FENCEKIT_FAULTTEST_PREFIX":  r.child["prefix"],
				"FENCEKIT_FAULTTEST_LOCK":    name,
				"FENCEKIT_FAULTTEST_PLACE":   waiterPlace.String(),
			})
			if got := w.next("queued"); got != "queued" {
				t.Fatalf("worker said %q; want queued; stderr:\n%s", got, w.stderr.String())
			}
			kill = func() {
				if err := w.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				_ = w.cmd.Wait()
				for l := range w.lines {
					t.Errorf("the killed waiter said %q", l)
				}
			}
		}
		var hs holds
		next := startQueuedWaiter(t, ctx, r.direct, name, "the waiter behind the dead one", &hs)
		kill()
		killed := time.Now()
		if err := releaseLock(ctx, r.direct, name, h); err != nil {
			t.Fatal(err)
		}
		next.servedWithin(t, killed, waiterBound, "the first waiter died")
		hs.check(t, first)
	})
}

// TestWaiterConnectionCut: the first waiter in line is cut off from the
// backend (every connection broken, new ones refused), then the holder
// releases. The waiter behind it is served within the place TTL bound, the
// cut-off one gets nothing while cut, and tokens rise.
func TestWaiterConnectionCut(t *testing.T) {
	eachQueueRig(t, func(t *testing.T, r *rig) {
		ctx := testCtx(t)
		name := unique(t, "lock")
		h := newOwner(t)
		first, err := acquireLock(ctx, r.direct, name, h, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var hs holds
		cutOff := startQueuedWaiter(t, ctx, r.backend, name, "the cut-off waiter", &hs)
		next := startQueuedWaiter(t, ctx, r.direct, name, "the waiter behind it", &hs)
		r.net.cut()
		defer r.net.heal()
		cut := time.Now()
		if err := releaseLock(ctx, r.direct, name, h); err != nil {
			t.Fatal(err)
		}
		next.servedWithin(t, cut, waiterBound, "the first waiter was cut off")
		cutOff.cancel()
		<-cutOff.done
		if cutOff.served.Load() != nil {
			t.Errorf("the cut-off waiter was served while cut off")
		}
		hs.check(t, first)
	})
}

// TestWaitersServerRestart: Redis restarts (without persistence) while
// three waiters are in line. The lease, the queue and the counter are lost;
// the waiters, failing transiently while the server is down, queue again
// and are all served, the first within the place TTL bound of the server's
// return, one at a time, with tokens above every earlier one.
func TestWaitersServerRestart(t *testing.T) {
	srv := testkit.NewRedisServer(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.Namespace(t)})
	name := unique(t, "lock")
	first, err := acquireLock(ctx, b, name, newOwner(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var hs holds
	ws := make([]*queuedWaiter, 3)
	for i := range ws {
		ws[i] = startQueuedWaiter(t, ctx, b, name, fmt.Sprintf("waiter %d", i+1), &hs)
	}
	srv.Stop()
	srv.Start()
	back := time.Now()
	deadline := time.After(waiterBound + 20*time.Second)
	var firstServed time.Time
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline:
			t.Fatalf("%s not served within %v of the restart", w.who, waiterBound+20*time.Second)
		}
		at := w.served.Load()
		if at == nil {
			t.Fatalf("%s: %v", w.who, w.err)
		}
		if firstServed.IsZero() || at.Before(firstServed) {
			firstServed = *at
		}
	}
	if d := firstServed.Sub(back); d > waiterBound {
		t.Errorf("the first waiter served %v after the server came back; want within %v", d, waiterBound)
	} else {
		t.Logf("the first waiter served %v after the server came back (bound %v)", d, waiterBound)
	}
	hs.check(t, first)
}

func isHeld(err error) bool { return errors.Is(err, lock.ErrHeld) }
