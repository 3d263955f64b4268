package etcd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// Waiters under faults (issue 22), on etcd: a waiter killed with SIGKILL,
// one whose connection is cut, and a restart of the whole cluster with
// waiters in line. The next waiter must be served within the place TTL
// bound, tokens must rise, and no two holders may overlap.

// waiterPlace is the waiters' place TTL: the test cluster's minimum lease
// TTL, which a shorter one would be raised to anyway.
const waiterPlace = 2 * time.Second

// waiterBound is how long after a waiter dies (or is cut off) the next one
// must be served: the place's lease, up to half a second for the leader's
// expiry sweep (its deletion wakes the waiter behind through its watch),
// plus a margin for -race on a loaded two-core machine.
const waiterBound = waiterPlace + 500*time.Millisecond + 1500*time.Millisecond

// waiterEnv switches the test binary into a waiter process (see TestMain):
// its value is "endpoints|prefix|lock name".
const waiterEnv = "FENCEKIT_ETCD_WAITER"

// queueWaitWorker is the waiter process: it waits in line for the lock
// (Client.Acquire, place TTL waiterPlace) and says "queued" once its first
// attempt was refused; its parent then kills it. Should it ever get the
// lock it says "acquired <token>" and holds on.
func queueWaitWorker() int {
	parts := strings.Split(os.Getenv(waiterEnv), "|")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "waiter: bad %s %q\n", waiterEnv, os.Getenv(waiterEnv))
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := etcdtest.NewClient(strings.Split(parts[0], ","))
	if err != nil {
		fmt.Fprintf(os.Stderr, "waiter: %v\n", err)
		return 3
	}
	defer cl.Close()
	var once sync.Once
	c := lock.New(fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: parts[1]}), &lock.Options{
		Queue: lock.QueueOptions{PlaceTTL: waiterPlace},
		Observer: &lock.Observer{Retrying: func(lock.Event) {
			once.Do(func() { fmt.Println("queued") })
		}},
	})
	l, err := c.Acquire(ctx, parts[2], time.Minute)
	if err != nil {
		fmt.Fprintf(os.Stderr, "waiter: acquire: %v\n", err)
		return 3
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

// check fails t unless the holdings, in the order they began, carry tokens
// above floor that strictly rise, each began after the one before had
// ended, and (when order is given) the waiters were served in that order.
func (h *holds) check(t *testing.T, floor fence.Token, order ...string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	spans := slices.Clone(h.spans)
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	prev := span{who: "the first holder", token: floor}
	var got []string
	for _, s := range spans {
		if s.token <= prev.token {
			t.Errorf("%s got token %d after %s's %d: tokens must rise", s.who, s.token, prev.who, prev.token)
		}
		if !prev.to.IsZero() && s.from.Before(prev.to) {
			t.Errorf("%s held the lock from %v, before %s released it at %v", s.who, s.from.Format(time.StampMicro), prev.who, prev.to.Format(time.StampMicro))
		}
		prev = s
		got = append(got, s.who)
	}
	if order != nil && !slices.Equal(got, order) {
		t.Errorf("served in the order %q; want %q", got, order)
	}
}

// queuedWaiter is a Client.Acquire in line in the background, releasing as
// soon as it is served.
type queuedWaiter struct {
	who    string
	queued chan struct{}
	done   chan struct{}
	served atomic.Pointer[time.Time]
	err    error
	cancel context.CancelFunc
}

// startQueuedWaiter starts who's Client.Acquire of name on b and returns
// once it is in line.
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
		// The span ends when Release starts: the next waiter may be
		// served as soon as the release lands, before its reply is back.
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

// servedWithin waits for w and fails t unless it was served within bound
// of since.
func (w *queuedWaiter) servedWithin(t *testing.T, since time.Time, bound time.Duration, after string) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(bound + 20*time.Second):
		t.Fatalf("%s not served within %v of %s", w.who, bound+20*time.Second, after)
	}
	at := w.served.Load()
	if at == nil {
		t.Fatalf("%s: Acquire: %v", w.who, w.err)
	}
	if d := at.Sub(since); d > bound {
		t.Errorf("%s served %v after %s; want within %v", w.who, d, after, bound)
	} else {
		t.Logf("%s served %v after %s (bound %v)", w.who, d, after, bound)
	}
}

// TestWaiterKilled: the first waiter in line is a process killed with
// SIGKILL. When the holder releases, the waiter behind it is served once
// the dead waiter's place lease runs out: within the place TTL bound.
func TestWaiterKilled(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	h := testkit.Owner(t)
	first, err := acquire(ctx, b, "l", h, time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterEnv+"="+strings.Join(etcdtest.Endpoints(t), ",")+"|"+ns+"|l")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "queued" {
		t.Fatalf("the waiter process said %q; want queued; stderr:\n%s", lines.Text(), stderr.String())
	}

	var hs holds
	next := startQueuedWaiter(t, ctx, b, "l", "the waiter behind the killed one", &hs)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		t.Errorf("the killed waiter said %q", lines.Text())
	}
	_ = cmd.Wait()
	killed := time.Now()
	if err := release(ctx, b, "l", h); err != nil {
		t.Fatal(err)
	}
	next.servedWithin(t, killed, waiterBound, "the first waiter was killed")
	hs.check(t, first)
}

// TestWaiterConnectionCut: the first waiter in line reaches the cluster
// through the fault proxy, which then cuts its connections and refuses new
// ones. When the holder releases, the waiter behind it is served within
// the place TTL bound, and the cut-off one gets nothing while cut.
func TestWaiterConnectionCut(t *testing.T) {
	addr := strings.TrimPrefix(etcdtest.Endpoints(t)[0], "http://")
	p := testkit.NewProxy(t, addr)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(sharedClient(t), &fenceetcd.BackendOptions{Prefix: ns})
	faulty := fenceetcd.NewBackend(dialClient(t, addr, p.Dial), &fenceetcd.BackendOptions{Prefix: ns})
	h := testkit.Owner(t)
	first, err := acquire(ctx, b, "l", h, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var hs holds
	cutOff := startQueuedWaiter(t, ctx, faulty, "l", "the cut-off waiter", &hs)
	next := startQueuedWaiter(t, ctx, b, "l", "the waiter behind it", &hs)
	p.RefuseNew(true)
	p.CutAll()
	defer p.Heal()
	cut := time.Now()
	if err := release(ctx, b, "l", h); err != nil {
		t.Fatal(err)
	}
	next.servedWithin(t, cut, waiterBound, "the first waiter was cut off")
	cutOff.cancel()
	<-cutOff.done
	if cutOff.served.Load() != nil {
		t.Errorf("the cut-off waiter was served while cut off")
	}
	hs.check(t, first)
}

// TestWaitersClusterRestart: every member of a cluster is killed and
// started again while three waiters are in line behind a holder. The
// holder's lease and the places are in the Raft log and survive (etcd
// refreshes leases when a leader is elected); the waiters renew their
// places once the cluster is back, and when the holder then releases they
// are served in their order, the first within the place TTL bound, with
// tokens above the holder's.
func TestWaitersClusterRestart(t *testing.T) {
	c := etcdtest.New(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	cl := client(t, c.Endpoints())
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	h := testkit.Owner(t)
	first, err := acquire(ctx, b, "l", h, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var hs holds
	ws := make([]*queuedWaiter, 3)
	var order []string
	for i := range ws {
		ws[i] = startQueuedWaiter(t, ctx, b, "l", fmt.Sprintf("waiter %d", i+1), &hs)
		order = append(order, ws[i].who)
	}
	c.Close()
	if err := c.Restart(c.Members...); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the holder's release after the restart", func(ctx context.Context) error {
		return release(ctx, b, "l", h)
	})
	released := time.Now()
	ws[0].servedWithin(t, released, waiterBound, "the release after the restart")
	for _, w := range ws[1:] {
		w.servedWithin(t, released, waiterBound*time.Duration(len(ws)), "the release after the restart")
	}
	hs.check(t, first, order...)
}
