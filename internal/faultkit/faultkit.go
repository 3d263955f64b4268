// Package faultkit drives the network faults that fencetest.RunFaults and
// drivertest.RunFaults share: a reply lost after the server executed the
// request, a connection cut while a request is on its way, a reply delayed
// past the caller's deadline. It knows neither stores nor lock backends: the
// kits hand it the call under test and the observations as functions.
//
// Every scenario is deterministic. A reply is "lost" by holding replies at
// the proxy, waiting until a second, healthy client sees that the server
// executed the request, and only then cutting the connection; a request is
// cut "in flight" once the proxy has read it and before it is delivered.
package faultkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
)

// Durations of the scenarios. None is a speed requirement: WaitFor and
// CallTimeout only bound a wait that an honest implementation ends in
// milliseconds, and DeadlineGrace is how late a call may return after its
// context's deadline.
const (
	// WaitFor bounds a poll for a state the server must reach.
	WaitFor = 10 * time.Second
	// CallTimeout bounds a call whose connection was cut: one still
	// running then hangs.
	CallTimeout = 15 * time.Second
	// ShortDeadline is the deadline of a call whose reply is delayed.
	ShortDeadline = 200 * time.Millisecond
	// DeadlineGrace is how long after ShortDeadline such a call must have
	// returned. It is well below go-redis's default ReadTimeout (3 s), so a
	// client that waits for its socket timeout instead of the context fails.
	DeadlineGrace = 2 * time.Second
	// pollEvery is the interval of Poll.
	pollEvery = 5 * time.Millisecond
)

// Poll calls cond until it reports true, failing when cond fails, after
// WaitFor, or when ctx ends.
func Poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(WaitFor)
	for {
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not happen within %v", what, WaitFor)
		}
		t := time.NewTimer(pollEvery)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// running is a call under test running in its own goroutine.
type running struct {
	done   chan struct{}
	err    error
	ctx    context.Context
	cancel context.CancelFunc
}

// start runs call with a context bounded by timeout.
func start(ctx context.Context, timeout time.Duration, call func(context.Context) error) *running {
	r := &running{done: make(chan struct{})}
	r.ctx, r.cancel = context.WithTimeout(ctx, timeout)
	go func() {
		defer close(r.done)
		r.err = call(r.ctx)
	}()
	return r
}

// wait returns the call's error. A call that only returned because its
// context ended is reported as hanging.
func (r *running) wait(what string) (callErr, err error) {
	<-r.done
	defer r.cancel()
	if r.ctx.Err() != nil && r.err != nil {
		return r.err, fmt.Errorf("%s: %w: it returned only when its context ended (%v): %v", what, ErrHang, r.ctx.Err(), r.err)
	}
	return r.err, nil
}

// abandon releases a call after the scenario failed, and returns cause.
func (r *running) abandon(p *faultproxy.Proxy, cause error) error {
	p.Heal()
	r.cancel()
	<-r.done
	return cause
}

// ErrHang marks a call that did not return after its connection was cut, or
// long after its deadline.
var ErrHang = errors.New("the call hangs")

// LoseReply runs call while the proxy holds every reply, waits until landed
// reports that the server executed the request, runs between (a newer
// holder's write, or nil), then cuts every connection, so that the held
// reply is lost, and heals the network. It returns call's error.
//
// The request must reach the server while replies are held, so the caller
// warms the store up first (a connection in the pool, a script or statement
// cached) with the same kind of call.
func LoseReply(ctx context.Context, p *faultproxy.Proxy, what string, call func(context.Context) error, landed func(context.Context) (bool, error), between func(context.Context) error) (callErr, err error) {
	return LoseReplyAfter(ctx, p, 0, what, call, landed, between)
}

// LoseReplyAfter is LoseReply for a call that sends pass requests, each
// waiting for its reply, before the request whose reply is lost (a read
// before a conditional write): their replies go through
// (faultproxy.Proxy.HoldRepliesAfter), every later one is held. pass = 0
// is LoseReply.
func LoseReplyAfter(ctx context.Context, p *faultproxy.Proxy, pass int, what string, call func(context.Context) error, landed func(context.Context) (bool, error), between func(context.Context) error) (callErr, err error) {
	p.HoldRepliesAfter(pass)
	r := start(ctx, CallTimeout, call)
	if err := Poll(ctx, what+" to reach the server while replies are held", landed); err != nil {
		return nil, r.abandon(p, fmt.Errorf("%w (the kit holds replies right after a warm-up call of the same kind; the request must go out on a connection that is already set up)", err))
	}
	if between != nil {
		if err := between(ctx); err != nil {
			return nil, r.abandon(p, err)
		}
	}
	p.CutAll() // discards the held reply
	p.Heal()
	return r.wait(what + " with its reply lost")
}

// CutInFlight runs call while the proxy holds every request, waits until
// the proxy has read some of it, then refuses new connections and cuts every
// open one, so that the request never reaches the server and a resend cannot
// either. When call has returned it heals the network and returns call's
// error.
func CutInFlight(ctx context.Context, p *faultproxy.Proxy, what string, call func(context.Context) error) (callErr, err error) {
	base := p.Stats().UpBytes
	p.Hold(faultproxy.Upstream)
	r := start(ctx, CallTimeout, call)
	sent := func(context.Context) (bool, error) { return p.Stats().UpBytes > base, nil }
	if err := Poll(ctx, what+" to send its request", sent); err != nil {
		return nil, r.abandon(p, err)
	}
	p.RefuseNew(true)
	p.CutAll()
	callErr, err = r.wait(what + " with its connection cut")
	p.Heal()
	return callErr, err
}

// PastDeadline runs call with a context whose deadline is ShortDeadline
// while the proxy delays every reply by far more. The call must return
// within DeadlineGrace after its deadline with an error matching
// context.DeadlineExceeded, or os.ErrDeadlineExceeded when the client set
// the context's deadline on its socket (go-redis with
// ContextTimeoutEnabled, for one). The network is healed before PastDeadline
// returns.
func PastDeadline(ctx context.Context, p *faultproxy.Proxy, what string, call func(context.Context) error) (callErr, err error) {
	p.SetLatency(faultproxy.Downstream, time.Hour)
	defer p.Heal()
	r := start(ctx, ShortDeadline, call)
	bound := time.NewTimer(ShortDeadline + DeadlineGrace)
	defer bound.Stop()
	select {
	case <-r.done:
	case <-bound.C:
		p.Heal() // let it finish, then report
		<-r.done
		return r.err, fmt.Errorf("%s with replies delayed: %w: still running %v after its context's deadline of %v (it returned %v once the delay was lifted); it must honour the context", what, ErrHang, DeadlineGrace, ShortDeadline, r.err)
	}
	r.cancel()
	if !errors.Is(r.err, context.DeadlineExceeded) && !errors.Is(r.err, os.ErrDeadlineExceeded) {
		return r.err, fmt.Errorf("%s with replies delayed past its deadline: returned %v; want an error matching context.DeadlineExceeded (or os.ErrDeadlineExceeded, from a socket deadline set to the context's)", what, r.err)
	}
	return r.err, nil
}

// RunEach runs check as a subtest of t for every name in names, each with a
// fresh faultproxy.Proxy in front of addr. newEnv builds the check's
// environment from the proxy's Dial (for the implementation under test) and
// a plain dialer (for a second one on the same data); run performs the
// check under timeout. fencetest.RunFaults and drivertest.RunFaults share it.
func RunEach[E any](t *testing.T, addr string, timeout time.Duration, names []string,
	newEnv func(t *testing.T, p *faultproxy.Proxy, plain faultproxy.DialFunc) E,
	run func(ctx context.Context, i int, env E) error) {
	t.Helper()
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			p, err := faultproxy.Start(addr)
			if err != nil {
				t.Fatalf("fault proxy in front of %s: %v", addr, err)
			}
			t.Cleanup(func() { _ = p.Close() })
			var d net.Dialer
			env := newEnv(t, p, d.DialContext)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if err := run(ctx, i, env); err != nil {
				t.Fatal(err)
			}
		})
	}
}
