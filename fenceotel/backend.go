package fenceotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Backend returns b with every call of the driver contract traced and
// measured, so that lock.New(tel.Backend(b), opts) traces every lock shape:
// locks, sets, resumes, semaphores, read-write locks and queued waiting.
//
//   - A span per Acquire, Extend, Release, Await and Leave
//     (fencekit.lock.Acquire, ...), carrying the lock name (for a set, its
//     first name and fencekit.lock.names, the count), the kind
//     (fencekit.lock.kind: exclusive, semaphore, read, write), the TTL,
//     the place TTL when the caller waits in line, fencekit.lock.resume on
//     a resume and, for an admitted Acquire, the token.
//   - The histogram fencekit.lock.backend.duration per call, Inspect
//     included (Inspect is measured but not traced).
//   - For Acquire, the attempt and contention counters.
//
// A refusal in line (held) is an outcome, not an error: its span's status
// stays unset. The wrapper embeds nothing and forwards every method, so it
// keeps every capability of b.
//
// A nil b is refused as lock.New refuses one: every call returns an error
// matching lock.ErrInvalid, with no span and no measurement. A call of b
// that panics still ends its span (status Error, "panic") before the panic
// goes on to the caller.
func (t *Telemetry) Backend(b driver.Backend) driver.Backend {
	return &tracedBackend{t: t, b: b}
}

type tracedBackend struct {
	t *Telemetry
	b driver.Backend
}

var _ driver.Backend = (*tracedBackend)(nil)

// lockOutcome names the result of a backend call, from a fixed set.
func lockOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, driver.ErrHeld):
		return "held"
	case errors.Is(err, driver.ErrNotHeld):
		return "not-held"
	}
	return "error"
}

// errNilBackend is the refusal of every call of Backend(nil).
var errNilBackend = fence.Invalid("fenceotel: nil backend")

// call runs one backend call under a span (unless op is "Inspect") with
// attrs, and records its duration.
func (tb *tracedBackend) call(ctx context.Context, op, name string, attrs []attribute.KeyValue, fn func(ctx context.Context) error) error {
	if tb.b == nil {
		return errNilBackend
	}
	var span trace.Span
	if op != "Inspect" {
		attrs = append(attrs, attrLock.String(name))
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

// requestAttrs describes an acquire request on its span.
func requestAttrs(req driver.Request) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attrKind.String(req.Kind.String()), attrTTL.Int64(req.TTL.Milliseconds())}
	if req.Names != nil {
		attrs = append(attrs, attrNames.Int(len(req.Names)))
	}
	if req.Place > 0 {
		attrs = append(attrs, attrPlace.Int64(req.Place.Milliseconds()))
	}
	if req.Limit > 0 {
		attrs = append(attrs, attrLimit.Int(req.Limit))
	}
	if req.Resume {
		attrs = append(attrs, attrResume.Bool(true))
	}
	return attrs
}

// requestName is the name a request is reported under: its name, or the
// first of its set.
func requestName(req driver.Request) string {
	if req.Names != nil && len(req.Names) > 0 {
		return req.Names[0]
	}
	return req.Name
}

func (tb *tracedBackend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	var g driver.Grant
	name := requestName(req)
	var attrs []attribute.KeyValue
	if tb.b != nil {
		attrs = requestAttrs(req)
	}
	err := tb.call(ctx, "Acquire", name, attrs, func(ctx context.Context) error {
		var err error
		g, err = tb.b.Acquire(ctx, req)
		if err == nil && g.Token.Valid() {
			trace.SpanFromContext(ctx).SetAttributes(attrToken.Int64(int64(g.Token)))
		}
		return err
	})
	if tb.b == nil {
		return g, err
	}
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
	return g, err
}

func claimAttrs(c driver.Claim, ttl time.Duration) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attrKind.String(c.Kind.String())}
	if ttl > 0 {
		attrs = append(attrs, attrTTL.Int64(ttl.Milliseconds()))
	}
	return attrs
}

func (tb *tracedBackend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	return tb.call(ctx, "Extend", c.Name, claimAttrs(c, ttl), func(ctx context.Context) error { return tb.b.Extend(ctx, c, ttl) })
}

func (tb *tracedBackend) Release(ctx context.Context, c driver.Claim) error {
	return tb.call(ctx, "Release", c.Name, claimAttrs(c, 0), func(ctx context.Context) error { return tb.b.Release(ctx, c) })
}

func (tb *tracedBackend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	return tb.call(ctx, "Await", c.Name, claimAttrs(c, 0), func(ctx context.Context) error { return tb.b.Await(ctx, c, max) })
}

func (tb *tracedBackend) Leave(ctx context.Context, c driver.Claim) error {
	return tb.call(ctx, "Leave", c.Name, claimAttrs(c, 0), func(ctx context.Context) error { return tb.b.Leave(ctx, c) })
}

func (tb *tracedBackend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	var info driver.Info
	err := tb.call(ctx, "Inspect", name, nil, func(ctx context.Context) error {
		var err error
		info, err = tb.b.Inspect(ctx, name, kind)
		return err
	})
	return info, err
}
