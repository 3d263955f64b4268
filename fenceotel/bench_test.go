package fenceotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fenceotel"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// BenchmarkAcquireRelease measures what the instrumentation adds to one
// acquire, fenced write and release on the in-process backend, where no
// network hides it: "plain" has none, "otel" the Backend, Store and
// Observer of one Telemetry on the SDK (a manual metric reader, and a
// tracer provider without span processors).
// Compare the two in one run.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, instrumented := range []bool{false, true} {
		name := "plain"
		if instrumented {
			name = "otel"
		}
		b.Run(name, func(b *testing.B) {
			var backend driver.Backend = memory.NewBackend()
			var store fence.Store = memory.NewStore()
			opts := &lock.Options{}
			if instrumented {
				// Spans are sampled and ended but kept by no processor, as
				// with an exporter that batches them elsewhere.
				tel, err := fenceotel.New(&fenceotel.Options{
					MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
					TracerProvider: sdktrace.NewTracerProvider(),
				})
				if err != nil {
					b.Fatal(err)
				}
				backend, store, opts.Observer = tel.Backend(backend), tel.Store(store), tel.Observer(nil)
			}
			client := lock.New(backend, opts)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, err := client.TryAcquire(ctx, "job", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Fenced(store).Put(ctx, "k", nil); err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
