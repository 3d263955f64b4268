package fenceotel

import (
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// endOnPanic, deferred right after a span starts, ends the span when the
// wrapped call panics (an exporter would otherwise never see it) and lets
// the panic go on unchanged. On a normal return it does nothing: the
// caller ends the span.
func endOnPanic(span trace.Span) {
	if v := recover(); v != nil {
		span.SetStatus(codes.Error, "panic")
		span.End()
		panic(v)
	}
}
