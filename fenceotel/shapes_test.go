package fenceotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// spanAttr returns the value of key on span s, and whether it is there.
func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// spansNamed returns the ended spans called name whose attribute key has
// value want ("" for any).
func (r *rig) spansNamed(name string, key attribute.Key, want string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() != name {
			continue
		}
		if v, ok := spanAttr(s, key); want == "" || (ok && v.Emit() == want) {
			out = append(out, s)
		}
	}
	return out
}

// TestEveryShapeThroughTheTracedBackend runs every lock shape through
// lock.New(tel.Backend(b)), the documented way to trace: each works as it
// does on b itself, and each call of the driver contract leaves its span
// with the shape's kind.
func TestEveryShapeThroughTheTracedBackend(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	client := lock.New(r.tel.Backend(memory.NewBackend()), &lock.Options{Queue: lock.QueueOptions{PlaceTTL: 300 * time.Millisecond}})
	kind := attribute.Key("fencekit.lock.kind")

	// A lock, with a waiter in line who is woken by the release.
	held, err := client.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := client.Acquire(ctx, "job", time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, func() bool { info, err := client.Inspect(ctx, "job"); return err == nil && info.Waiting == 1 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("queued Acquire through the traced backend: %v", err)
	}
	if len(r.spansNamed("fencekit.lock.Await", kind, "exclusive")) == 0 {
		t.Errorf("no Await span: the waiter did not wait in line through the wrapper")
	}
	if len(r.spansNamed("fencekit.lock.Acquire", attribute.Key("fencekit.lock.place_ttl_ms"), "300")) == 0 {
		t.Errorf("no Acquire span with a place: the waiter polled instead of queueing")
	}

	// A waiter that gives up leaves the line.
	held, err = client.Acquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := client.Acquire(wctx, "job", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire that times out in line = %v; want ErrNotAcquired", err)
	}
	cancel()
	if len(r.spansNamed("fencekit.lock.Leave", kind, "exclusive")) == 0 {
		t.Errorf("no Leave span for a waiter that gave up")
	}

	// Resume, with the one-step request.
	resumed, err := client.Resume(ctx, "job", held.Owner(), time.Minute)
	if err != nil || resumed.Token() != held.Token() {
		t.Fatalf("Resume = %v, %v; want the same token %d", resumed, err, held.Token())
	}
	if len(r.spansNamed("fencekit.lock.Acquire", attribute.Key("fencekit.lock.resume"), "true")) != 1 {
		t.Errorf("want one Acquire span marked as a resume")
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A set, in one request.
	set, err := client.AcquireMulti(ctx, []string{"a", "b", "c"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.spansNamed("fencekit.lock.Acquire", attribute.Key("fencekit.lock.names"), "3")) != 1 {
		t.Errorf("want one Acquire span for the set of three names (taken in one step)")
	}

	// A semaphore and a read-write lock.
	sem := client.Semaphore("pool", 2)
	p1, err := sem.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx, time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("third permit of two = %v; want ErrHeld", err)
	}
	info, err := sem.Inspect(ctx)
	if err != nil || len(info.Holders) != 2 || info.Limit != 2 {
		t.Fatalf("Semaphore.Inspect = %+v, %v; want two holders of 2", info, err)
	}
	for _, p := range []*lock.Lease{p1, p2} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rw := client.RWLock("doc")
	w, err := rw.AcquireWrite(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rd, err := rw.AcquireRead(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if rd.PriorWriter() != w.Token() {
		t.Errorf("reader's PriorWriter = %d; want the writer's token %d", rd.PriorWriter(), w.Token())
	}
	if err := rd.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"semaphore", "read", "write"} {
		if len(r.spansNamed("fencekit.lock.Acquire", kind, k)) == 0 || len(r.spansNamed("fencekit.lock.Release", kind, k)) == 0 {
			t.Errorf("no Acquire and Release spans of kind %s", k)
		}
	}
}

// TestKeepAliveSpansJoinTheCallersTrace: the keep-alive's renewals run on
// a context that keeps the values of the one the lease was acquired with,
// so their spans belong to the caller's trace.
func TestKeepAliveSpansJoinTheCallersTrace(t *testing.T) {
	r := newRig(t, true)
	ctx, parent := r.tp.Tracer("test").Start(context.Background(), "job")
	client := lock.New(r.tel.Backend(memory.NewBackend()), &lock.Options{KeepAlive: true})
	lease, err := client.Acquire(ctx, "job", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(r.spansNamed("fencekit.lock.Extend", "", "")) >= 2 })
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	parent.End()
	want := parent.SpanContext().TraceID()
	for _, name := range []string{"fencekit.lock.Acquire", "fencekit.lock.Extend"} {
		for _, s := range r.spansNamed(name, "", "") {
			if s.SpanContext().TraceID() != want {
				t.Errorf("%s span in trace %v; want the caller's trace %v", name, s.SpanContext().TraceID(), want)
			}
		}
	}
}

// waitFor polls cond until it holds, failing the test after 5s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
