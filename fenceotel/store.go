package fenceotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
)

// Store returns s with every call traced and measured: a span per Put,
// Delete and Advance (fencekit.store.Put, ...) carrying the key and the
// token, and, when refused, the fence that refused it; and the histogram
// fencekit.store.duration per call, Get included, by operation and outcome
// (ok, stale, not-found, error). A stale refusal sets the span's status to
// Error: a holder whose lease was overtaken tried to write.
//
// A nil s is refused as Lease.Fenced refuses one: every call returns an
// error matching fence.ErrInvalid, with no span and no measurement. A call
// of s that panics still ends its span (status Error, "panic") before the
// panic goes on to the caller.
func (t *Telemetry) Store(s fence.Store) fence.Store {
	return &tracedStore{t: t, s: s}
}

type tracedStore struct {
	t *Telemetry
	s fence.Store
}

var _ fence.Store = (*tracedStore)(nil)

// storeAttrs returns the attributes of one store measurement.
func storeAttrs(op, outcome string) metric.MeasurementOption {
	return metric.WithAttributes(attrOp.String(op), attrOutcome.String(outcome))
}

// storeOutcome names the result of a store call, from a fixed set.
func storeOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fence.ErrStale):
		return "stale"
	case errors.Is(err, fence.ErrNotFound):
		return "not-found"
	}
	return "error"
}

// errNilStore is the refusal of every call of Store(nil).
var errNilStore = fence.Invalid("fenceotel: nil store")

// write runs one fenced write under a span and records its duration.
func (ts *tracedStore) write(ctx context.Context, op, key string, token fence.Token, fn func(ctx context.Context) error) error {
	if ts.s == nil {
		return errNilStore
	}
	ctx, span := ts.t.tracer.Start(ctx, "fencekit.store."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrKey.String(key), attrToken.Int64(int64(token))))
	defer endOnPanic(span)
	start := time.Now()
	err := fn(ctx)
	outcome := storeOutcome(err)
	ts.t.storeDuration.Record(context.Background(), time.Since(start).Seconds(), storeAttrs(op, outcome))
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil {
		var stale *fence.StaleError
		if errors.As(err, &stale) {
			span.SetAttributes(attrFence.Int64(int64(stale.Fence)), attrOfferedTk.Int64(int64(stale.Token)))
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
	return err
}

func (ts *tracedStore) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	return ts.write(ctx, "Put", key, token, func(ctx context.Context) error { return ts.s.Put(ctx, key, token, value) })
}

func (ts *tracedStore) Delete(ctx context.Context, key string, token fence.Token) error {
	return ts.write(ctx, "Delete", key, token, func(ctx context.Context) error { return ts.s.Delete(ctx, key, token) })
}

func (ts *tracedStore) Advance(ctx context.Context, key string, token fence.Token) error {
	return ts.write(ctx, "Advance", key, token, func(ctx context.Context) error { return ts.s.Advance(ctx, key, token) })
}

// Get is measured, not traced: reads are not fenced writes.
func (ts *tracedStore) Get(ctx context.Context, key string) (fence.Record, error) {
	if ts.s == nil {
		return fence.Record{}, errNilStore
	}
	start := time.Now()
	rec, err := ts.s.Get(ctx, key)
	ts.t.storeDuration.Record(context.Background(), time.Since(start).Seconds(), storeAttrs("Get", storeOutcome(err)))
	return rec, err
}
