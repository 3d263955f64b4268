package fenceotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// Backend returns b with every call traced and measured: a span per
// Acquire, Extend and Release (fencekit.lock.Acquire, ...), carrying the
// lock name, the TTL and, for Acquire, the token; the histogram
// fencekit.lock.backend.duration per call; and, for Acquire, the attempt
// and contention counters. Inspect is measured but not traced. A held
// lock is an outcome, not an error: its span's status stays unset.
//
// A nil b is refused as lock.New refuses one: every call returns an error
// matching lock.ErrInvalid, with no span and no measurement. A call of b
// that panics still ends its span (status Error, "panic") before the panic
// goes on to the caller.
func (t *Telemetry) Backend(b lock.Backend) lock.Backend {
	return &tracedBackend{t: t, b: b}
}

type tracedBackend struct {
	t *Telemetry
	b lock.Backend
}

var _ lock.Backend = (*tracedBackend)(nil)

// lockOutcome names the result of a backend call, from a fixed set.
func lockOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, lock.ErrHeld):
		return "held"
	case errors.Is(err, lock.ErrNotHeld):
		return "not-held"
	}
	return "error"
}

// errNilBackend is the refusal of every call of Backend(nil).
var errNilBackend = fence.Invalid("fenceotel: nil backend")

// call runs one backend call under a span (unless op is "Inspect") and
// records its duration.
func (tb *tracedBackend) call(ctx context.Context, op, name string, ttl time.Duration, fn func(ctx context.Context) error) error {
	if tb.b == nil {
		return errNilBackend
	}
	var span trace.Span
	if op != "Inspect" {
		attrs := []attribute.KeyValue{attrLock.String(name)}
		if ttl > 0 {
			attrs = append(attrs, attrTTL.Int64(ttl.Milliseconds()))
		}
		ctx, span = tb.t.tracer.Start(ctx, "fencekit.lock."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		defer endOnPanic(span)
	}
	start := time.Now()
	err := fn(ctx)
	outcome := lockOutcome(err)
	tb.t.backendDuration.Record(context.Background(), time.Since(start).Seconds(),
		tb.t.lockAttrs(name, attrOp.String(op), attrOutcome.String(outcome)))
	if span != nil {
		span.SetAttributes(attrOutcome.String(outcome))
		if outcome == "error" || outcome == "not-held" {
			span.RecordError(err)
			span.SetStatus(codes.Error, outcome)
		}
		span.End()
	}
	return err
}

func (tb *tracedBackend) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	var token fence.Token
	err := tb.call(ctx, "Acquire", name, ttl, func(ctx context.Context) error {
		var err error
		token, err = tb.b.Acquire(ctx, name, owner, ttl)
		if err == nil {
			trace.SpanFromContext(ctx).SetAttributes(attrToken.Int64(int64(token)))
		}
		return err
	})
	outcome := "acquired"
	switch lockOutcome(err) {
	case "held":
		outcome = "held"
		tb.t.contention.Add(context.Background(), 1, tb.t.lockAttrs(name))
	case "ok":
	default:
		outcome = "error"
	}
	tb.t.attempts.Add(context.Background(), 1, tb.t.lockAttrs(name, attrOutcome.String(outcome)))
	return token, err
}

func (tb *tracedBackend) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	return tb.call(ctx, "Extend", name, ttl, func(ctx context.Context) error { return tb.b.Extend(ctx, name, owner, ttl) })
}

func (tb *tracedBackend) Release(ctx context.Context, name, owner string) error {
	return tb.call(ctx, "Release", name, 0, func(ctx context.Context) error { return tb.b.Release(ctx, name, owner) })
}

func (tb *tracedBackend) Inspect(ctx context.Context, name string) (lock.Info, error) {
	var info lock.Info
	err := tb.call(ctx, "Inspect", name, 0, func(ctx context.Context) error {
		var err error
		info, err = tb.b.Inspect(ctx, name)
		return err
	})
	return info, err
}
