package fenceotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fenceotel"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// rig is a Telemetry on the SDK's in-memory metric reader and span
// recorder.
type rig struct {
	tel    *fenceotel.Telemetry
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newRig(t testing.TB, lockNames bool) *rig {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel, err := fenceotel.New(&fenceotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: tp,
		LockNames:      lockNames,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{tel: tel, reader: reader, spans: spans, tp: tp}
}

// point is one data point: its attributes and its value (a sum, or a
// histogram's count).
type point struct {
	attrs attribute.Set
	value float64
}

// collect returns every metric's data points by name.
func (r *rig) collect(t *testing.T) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fenceotel.ScopeName {
			t.Errorf("scope %q; want %q", sm.Scope.Name, fenceotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{p.Attributes, float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{p.Attributes, float64(p.Count)})
				}
			default:
				t.Errorf("metric %s has unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// sum adds the values of name's points whose attributes include every
// key=value in want.
func sum(points map[string][]point, name string, want ...attribute.KeyValue) float64 {
	total := 0.0
	for _, p := range points[name] {
		ok := true
		for _, kv := range want {
			if v, found := p.attrs.Value(kv.Key); !found || v != kv.Value {
				ok = false
			}
		}
		if ok {
			total += p.value
		}
	}
	return total
}

// flakyExtend fails every Extend transiently while fail is set.
type flakyExtend struct {
	driver.Backend
	fail bool
}

func (f *flakyExtend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	if f.fail {
		return driver.Transient(errors.New("connection reset"))
	}
	return f.Backend.Extend(ctx, c, ttl)
}

var (
	outcome = attribute.Key("fencekit.outcome")
	cause   = attribute.Key("fencekit.cause")
	op      = attribute.Key("fencekit.operation")
	name    = attribute.Key("fencekit.lock.name")
)

// Every metric moves as the events say, and no lock name appears unless
// asked for.
func TestMetrics(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	raw := memory.NewStore()
	flaky := &flakyExtend{Backend: memory.NewBackend()}
	backend := r.tel.Backend(flaky)
	store := r.tel.Store(raw)
	client := lock.New(backend, &lock.Options{Observer: r.tel.Observer(nil), MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})

	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Acquire(ctx, "job", time.Minute, lock.WithMaxAttempts(3)); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("contended Acquire = %v; want ErrHeld", err)
	}
	flaky.fail = true
	if err := lease.Extend(ctx, time.Minute); err == nil {
		t.Fatal("Extend succeeded on a failing backend")
	}
	flaky.fail = false
	w := lease.Fenced(store)
	if err := w.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := raw.Advance(ctx, "k", lease.Token()+1); err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, "k", []byte("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Put = %v; want stale", err)
	}
	if _, err := store.Get(ctx, "nothing"); !errors.Is(err, fence.ErrNotFound) {
		t.Fatal(err)
	}
	m := r.collect(t)
	if got := sum(m, "fencekit.lock.held"); got != 1 {
		t.Errorf("held = %v while one lease is held; want 1", got)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := client.TryAcquire(ctx, "short", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()

	m = r.collect(t)
	for _, c := range []struct {
		metric string
		attrs  []attribute.KeyValue
		want   float64
	}{
		{"fencekit.lock.held", nil, 0},
		{"fencekit.lock.acquire.duration", nil, 2},
		{"fencekit.lock.acquire.attempts", []attribute.KeyValue{outcome.String("acquired")}, 2},
		{"fencekit.lock.acquire.attempts", []attribute.KeyValue{outcome.String("held")}, 3},
		{"fencekit.lock.contention", nil, 3},
		{"fencekit.lock.renewal.failures", []attribute.KeyValue{cause.String("transient")}, 1},
		{"fencekit.lock.stale", nil, 1},
		{"fencekit.lock.lost", []attribute.KeyValue{cause.String("deadline")}, 1},
		{"fencekit.lock.lost", nil, 1},
		{"fencekit.lock.backend.duration", []attribute.KeyValue{op.String("Extend"), outcome.String("error")}, 1},
		{"fencekit.lock.backend.duration", []attribute.KeyValue{op.String("Release"), outcome.String("ok")}, 1},
		{"fencekit.store.duration", []attribute.KeyValue{op.String("Put"), outcome.String("ok")}, 1},
		{"fencekit.store.duration", []attribute.KeyValue{op.String("Put"), outcome.String("stale")}, 1},
		{"fencekit.store.duration", []attribute.KeyValue{op.String("Get"), outcome.String("not-found")}, 1},
	} {
		if got := sum(m, c.metric, c.attrs...); got != c.want {
			t.Errorf("%s %v = %v; want %v", c.metric, c.attrs, got, c.want)
		}
	}
	for metric, points := range m {
		for _, p := range points {
			if _, ok := p.attrs.Value(name); ok {
				t.Errorf("%s carries the lock name without LockNames: %v", metric, p.attrs)
			}
		}
	}
}

// With LockNames, the lock metrics carry the name; store metrics never
// carry keys.
func TestLockNamesOptIn(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	client := lock.New(r.tel.Backend(memory.NewBackend()), &lock.Options{Observer: r.tel.Observer(nil)})
	store := r.tel.Store(memory.NewStore())
	if err := client.Do(ctx, "leader", time.Minute, func(ctx context.Context, l *lock.Lease) error {
		return l.Fenced(store).Put(ctx, "secret-key", nil)
	}); err != nil {
		t.Fatal(err)
	}
	m := r.collect(t)
	if got := sum(m, "fencekit.lock.acquire.attempts", name.String("leader"), outcome.String("acquired")); got != 1 {
		t.Errorf("attempts{lock=leader} = %v; want 1", got)
	}
	if got := sum(m, "fencekit.lock.acquire.duration", name.String("leader")); got != 1 {
		t.Errorf("acquire.duration{lock=leader} = %v; want 1", got)
	}
	for _, p := range m["fencekit.store.duration"] {
		for _, kv := range p.attrs.ToSlice() {
			if kv.Value.AsString() == "secret-key" {
				t.Errorf("a store metric carries the key: %v", p.attrs)
			}
		}
	}
}

// Acquire, Extend, Release and fenced writes each make a span, under the
// caller's span, with the lock name or key, the token, and an error status
// for a stale write but not for a held lock.
func TestSpans(t *testing.T) {
	r := newRig(t, false)
	ctx, parent := r.tp.Tracer("test").Start(context.Background(), "request")
	raw := memory.NewStore()
	store := r.tel.Store(raw)
	client := lock.New(r.tel.Backend(memory.NewBackend()), nil)
	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.TryAcquire(ctx, "job", time.Minute); !errors.Is(err, lock.ErrHeld) {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := lease.Fenced(store).Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := raw.Advance(ctx, "k", lease.Token()+1); err != nil {
		t.Fatal(err)
	}
	if err := lease.Fenced(store).Put(ctx, "k", []byte("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()

	type want struct {
		name, outcome string
		status        codes.Code
	}
	var got []want
	for _, s := range r.spans.Ended() {
		if s.Name() == "request" {
			continue
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the caller's span", s.Name())
		}
		attrs := attribute.NewSet(s.Attributes()...)
		oc, _ := attrs.Value(outcome)
		got = append(got, want{s.Name(), oc.AsString(), s.Status().Code})
		switch s.Name() {
		case "fencekit.lock.Acquire":
			if v, _ := attrs.Value("fencekit.lock.name"); v.AsString() != "job" {
				t.Errorf("Acquire span without the lock name: %v", s.Attributes())
			}
			if v, ok := attrs.Value("fencekit.token"); oc.AsString() == "ok" && (!ok || v.AsInt64() != int64(lease.Token())) {
				t.Errorf("Acquire span's token = %v; want %d", v.AsInt64(), lease.Token())
			}
		case "fencekit.store.Put":
			if v, _ := attrs.Value("fencekit.key"); v.AsString() != "k" {
				t.Errorf("Put span without the key: %v", s.Attributes())
			}
			if v, ok := attrs.Value("fencekit.fence"); oc.AsString() == "stale" && (!ok || v.AsInt64() != int64(lease.Token()+1)) {
				t.Errorf("stale Put span's fence = %v; want %d", v.AsInt64(), lease.Token()+1)
			}
		}
	}
	wantSpans := []want{
		{"fencekit.lock.Acquire", "ok", codes.Unset},
		{"fencekit.lock.Acquire", "held", codes.Unset},
		{"fencekit.lock.Extend", "ok", codes.Unset},
		{"fencekit.store.Put", "ok", codes.Unset},
		{"fencekit.store.Put", "stale", codes.Error},
		{"fencekit.lock.Release", "ok", codes.Unset},
	}
	if len(got) != len(wantSpans) {
		t.Fatalf("spans %v; want %v", got, wantSpans)
	}
	for i := range got {
		if got[i] != wantSpans[i] {
			t.Errorf("span %d = %v; want %v", i, got[i], wantSpans[i])
		}
	}
}

// everyKind returns an Observer whose every field appends the kind of event
// it hears of to *kinds ("acquired", "extended", ...).
func everyKind(kinds *[]string) *lock.Observer {
	note := func(kind string) func(lock.Event) {
		return func(lock.Event) { *kinds = append(*kinds, kind) }
	}
	return &lock.Observer{
		Acquired:      note("acquired"),
		Extended:      note("extended"),
		Released:      note("released"),
		Lost:          note("lost"),
		Stale:         note("stale"),
		RenewalFailed: note("renewal-failed"),
		Retrying:      note("retrying"),
	}
}

// The Observer passes every event on to next's field of the same kind,
// those it records nothing for included.
func TestObserverChains(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	var kinds []string
	client := lock.New(memory.NewBackend(), &lock.Options{MaxAttempts: 2, MinBackoff: time.Millisecond, Observer: r.tel.Observer(everyKind(&kinds))})
	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Acquire(ctx, "job", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second Acquire = %v; want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := client.TryAcquire(ctx, "short", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()
	want := []string{"acquired", "extended", "retrying", "released", "acquired", "lost"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("next saw %v; want %v", kinds, want)
	}
	m := r.collect(t)
	if got := sum(m, "fencekit.lock.lost", cause.String("deadline")); got != 1 {
		t.Errorf("lost{cause=deadline} = %v; want 1", got)
	}
}

// A next with only some fields set gets only those events, and the
// metrics are recorded all the same.
func TestObserverChainsToTheFieldsSet(t *testing.T) {
	r := newRig(t, false)
	ctx := context.Background()
	var released []string
	client := lock.New(memory.NewBackend(), &lock.Options{Observer: r.tel.Observer(&lock.Observer{
		Released: func(e lock.Event) { released = append(released, e.Name) },
	})})
	lease, err := client.TryAcquire(ctx, "job", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	m := r.collect(t)
	if got := sum(m, "fencekit.lock.held"); got != 1 {
		t.Errorf("held = %v with the lease live; want 1", got)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if len(released) != 1 || released[0] != "job" {
		t.Fatalf("next's Released saw %v; want [job]", released)
	}
	m = r.collect(t)
	if got := sum(m, "fencekit.lock.held"); got != 0 {
		t.Errorf("held = %v after the release; want 0", got)
	}
	if got := sum(m, "fencekit.lock.acquire.duration"); got != 1 {
		t.Errorf("acquire.duration count = %v; want 1", got)
	}
}
