package faulttest

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// simNet stands in for the network in front of the memory backend, with
// the proxy's semantics: a request travels (latency up), executes whether
// or not its caller still waits, and its reply travels back (latency down)
// or is lost; a cut fails every call at once.
type simNet struct {
	mu      sync.Mutex
	changed chan struct{}
	up      time.Duration
	down    time.Duration
	refuse  bool
	epoch   int // bumped by cutInFlight
	drops   []chan struct{}
}

// The simulated failures wrap the errno a real connection reports, so that
// driver.Retryable judges them as it judges the real ones.
var (
	errSimCut     = fmt.Errorf("simnet: %w", syscall.ECONNREFUSED)
	errSimDropped = fmt.Errorf("simnet: reply lost: %w", syscall.ECONNRESET)
)

func newSimNet() *simNet { return &simNet{changed: make(chan struct{})} }

func (n *simNet) update(f func()) {
	n.mu.Lock()
	f()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
}

func (n *simNet) dropNextReply() <-chan struct{} {
	ch := make(chan struct{})
	n.update(func() { n.drops = append(n.drops, ch) })
	return ch
}

func (n *simNet) delay(up, down time.Duration) { n.update(func() { n.up, n.down = up, down }) }
func (n *simNet) cut()                         { n.update(func() { n.refuse = true }) }

// cutInFlight fails every call under way, as cutting open connections
// does; new calls go through.
func (n *simNet) cutInFlight() { n.update(func() { n.epoch++ }) }

// chaosNet adapts simNet to the chaos runner.
type chaosNet struct{ n *simNet }

func (c chaosNet) Delay(d time.Duration) { c.n.delay(d/2, d-d/2) }
func (c chaosNet) Cut()                  { c.n.cutInFlight() }
func (c chaosNet) DropReply()            { c.n.dropNextReply() }
func (c chaosNet) Heal()                 { c.n.heal() }

func (n *simNet) heal() {
	n.update(func() {
		n.up, n.down, n.refuse = 0, 0, false
		for _, ch := range n.drops {
			close(ch)
		}
		n.drops = nil
	})
}

// travel waits until a message sent at `at` has crossed (its latency,
// re-read on every change, has passed). It returns false if the network was
// cut meanwhile.
func (n *simNet) travel(at time.Time, down bool, epoch int) bool {
	for {
		n.mu.Lock()
		lat, refuse, changed, cut := n.up, n.refuse, n.changed, n.epoch != epoch
		if down {
			lat = n.down
		}
		n.mu.Unlock()
		if refuse || cut {
			return false
		}
		d := time.Until(at.Add(lat))
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

func (n *simNet) takeDrop() chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.drops) == 0 {
		return nil
	}
	ch := n.drops[0]
	n.drops = n.drops[1:]
	return ch
}

// simCall sends f across the network.
func simCall[T any](ctx context.Context, n *simNet, f func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	done := make(chan result, 1)
	n.mu.Lock()
	epoch := n.epoch
	n.mu.Unlock()
	go func() {
		if !n.travel(time.Now(), false, epoch) {
			done <- result{err: errSimCut}
			return
		}
		// The server does not know the caller's deadline.
		v, err := f(context.Background())
		if ch := n.takeDrop(); ch != nil {
			close(ch)
			done <- result{err: errSimDropped}
			return
		}
		if !n.travel(time.Now(), true, epoch) {
			done <- result{err: errSimCut}
			return
		}
		done <- result{v: v, err: err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func simDo(ctx context.Context, n *simNet, f func(context.Context) error) error {
	_, err := simCall(ctx, n, func(c context.Context) (struct{}, error) { return struct{}{}, f(c) })
	return err
}

// simBackend is a driver.Backend behind simNet: every call, whatever its
// shape, travels the simulated network.
type simBackend struct {
	n *simNet
	b driver.Backend
}

func (s simBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	return simCall(ctx, s.n, func(c context.Context) (driver.Grant, error) { return s.b.Acquire(c, req) })
}

func (s simBackend) Extend(ctx context.Context, claim driver.Claim, ttl time.Duration) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.b.Extend(c, claim, ttl) })
}

func (s simBackend) Release(ctx context.Context, claim driver.Claim) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.b.Release(c, claim) })
}

// Await waits on the server side for at most max, as a server's blocking
// wait would; the caller's ctx still ends its wait.
func (s simBackend) Await(ctx context.Context, claim driver.Claim, max time.Duration) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.b.Await(c, claim, max) })
}

func (s simBackend) Leave(ctx context.Context, claim driver.Claim) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.b.Leave(c, claim) })
}

func (s simBackend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	return simCall(ctx, s.n, func(c context.Context) (driver.Info, error) { return s.b.Inspect(c, name, kind) })
}

// simStore is a fence.Store behind simNet.
type simStore struct {
	n *simNet
	s fence.Store
}

func (s simStore) Put(ctx context.Context, key string, token fence.Token, v []byte) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.s.Put(c, key, token, v) })
}

func (s simStore) Get(ctx context.Context, key string) (fence.Record, error) {
	return simCall(ctx, s.n, func(c context.Context) (fence.Record, error) { return s.s.Get(c, key) })
}

func (s simStore) Delete(ctx context.Context, key string, token fence.Token) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.s.Delete(c, key, token) })
}

func (s simStore) Advance(ctx context.Context, key string, token fence.Token) error {
	return simDo(ctx, s.n, func(c context.Context) error { return s.s.Advance(c, key, token) })
}
