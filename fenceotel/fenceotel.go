// Package fenceotel reports fencekit's locks and fenced writes to
// OpenTelemetry: metrics from a lock.Client's events and from its backend's
// calls, and spans for every call of the driver contract (Acquire, Extend,
// Release, Await, Leave: every lock shape, queued waiting included) and
// every write to a fenced store. It is a module of its own, so that
// OpenTelemetry stays out of the core module's graph.
//
// tel.Backend wraps any driver.Backend and keeps every capability of what
// it wraps (TestEveryShapeThroughTheTracedBackend). The renewals of the
// keep-alive and the releases after a lost context run on a context that
// keeps the values of the one the lease was acquired with, so their spans
// join the caller's trace (TestKeepAliveSpansJoinTheCallersTrace).
//
// Wire it in three places, all optional:
//
//	tel, err := fenceotel.New(nil) // the global MeterProvider and TracerProvider
//	client := lock.New(tel.Backend(backend), &lock.Options{Observer: tel.Observer(nil)})
//	store := tel.Store(fenceredis.NewStore(rdb, nil))
//
// tel.Observer(next) returns a *lock.Observer that records the event
// metrics below, then hands each event to next's field of the same kind,
// when set: pass lock.SlogObserver(logger) to log the events too, or nil.
//
// The metrics (see docs/operations.md for what to alert on):
//
//	fencekit.lock.acquire.duration   histogram, s: from the start of an acquiring call
//	                                 (Acquire, Do, Campaign) to the lease, backoff included
//	fencekit.lock.acquire.attempts   counter: backend acquire attempts, by outcome
//	                                 (acquired, held, error)
//	fencekit.lock.contention         counter: attempts refused because another owner held the lock
//	fencekit.lock.held               up-down counter: leases held now by this process
//	fencekit.lock.lost               counter: leases lost, by cause (lock.Event.Cause:
//	                                 not-held, deadline, late-reply, renewal-error)
//	fencekit.lock.renewal.failures   counter: renewals that failed without ending the lease, by cause
//	fencekit.lock.stale              counter: fenced writes refused as stale (Lease.Fenced,
//	                                 Guard.Check and UpdateFenced of postgres and sqldb)
//	fencekit.lock.backend.duration   histogram, s: each backend call, by operation and outcome
//	fencekit.store.duration          histogram, s: each Store call, by operation and outcome
//	                                 (ok, stale, not-found, error)
//
// Cardinality is bounded: the attributes are fixed sets (operation,
// outcome, cause). Lock names become the attribute fencekit.lock.name only
// when Options.LockNames says so, since a system that locks per entity
// (invoice/42) would otherwise create a series per entity. Store keys never
// become metric attributes. Spans, which are not aggregated, always carry
// the lock name or the store key.
package fenceotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/fencekit/fencekit/fenceotel"

// Options configures a Telemetry. A nil *Options means the defaults.
type Options struct {
	// MeterProvider supplies the meter; nil means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider supplies the tracer; nil means
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// LockNames adds the lock name to every lock metric as the attribute
	// fencekit.lock.name. Off by default: turn it on only when the set of
	// lock names is small and fixed (a few leader elections, a few job
	// names), never for per-entity locks.
	LockNames bool
}

// Telemetry holds the instruments. It is safe for concurrent use; make one
// per process and share it.
type Telemetry struct {
	tracer    trace.Tracer
	lockNames bool

	acquireDuration metric.Float64Histogram
	attempts        metric.Int64Counter
	contention      metric.Int64Counter
	held            metric.Int64UpDownCounter
	lost            metric.Int64Counter
	renewalFailures metric.Int64Counter
	stale           metric.Int64Counter
	backendDuration metric.Float64Histogram
	storeDuration   metric.Float64Histogram
}

// Attribute keys.
const (
	attrLock      = attribute.Key("fencekit.lock.name")
	attrOp        = attribute.Key("fencekit.operation")
	attrOutcome   = attribute.Key("fencekit.outcome")
	attrCause     = attribute.Key("fencekit.cause")
	attrToken     = attribute.Key("fencekit.token")
	attrKey       = attribute.Key("fencekit.key")
	attrTTL       = attribute.Key("fencekit.ttl_ms")
	attrFence     = attribute.Key("fencekit.fence")
	attrOfferedTk = attribute.Key("fencekit.offered_token")
	attrKind      = attribute.Key("fencekit.lock.kind")
	attrNames     = attribute.Key("fencekit.lock.names")
	attrPlace     = attribute.Key("fencekit.lock.place_ttl_ms")
	attrLimit     = attribute.Key("fencekit.lock.limit")
	attrResume    = attribute.Key("fencekit.lock.resume")
)

// New creates the instruments. It fails only if the meter refuses one.
func New(opts *Options) (*Telemetry, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	m := o.MeterProvider.Meter(ScopeName)
	t := &Telemetry{tracer: o.TracerProvider.Tracer(ScopeName), lockNames: o.LockNames}
	var err error
	seconds := []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	if t.acquireDuration, err = m.Float64Histogram("fencekit.lock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquiring call to the lease, backoff included."),
		metric.WithExplicitBucketBoundaries(seconds...)); err != nil {
		return nil, err
	}
	if t.attempts, err = m.Int64Counter("fencekit.lock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts sent to the backend, by outcome: acquired, held, error.")); err != nil {
		return nil, err
	}
	if t.contention, err = m.Int64Counter("fencekit.lock.contention", metric.WithUnit("{attempt}"),
		metric.WithDescription("Acquire attempts refused because another owner held the lock.")); err != nil {
		return nil, err
	}
	if t.held, err = m.Int64UpDownCounter("fencekit.lock.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases this process holds now.")); err != nil {
		return nil, err
	}
	if t.lost, err = m.Int64Counter("fencekit.lock.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost, by cause: not-held, deadline, late-reply, renewal-error.")); err != nil {
		return nil, err
	}
	if t.renewalFailures, err = m.Int64Counter("fencekit.lock.renewal.failures", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals that failed without ending the lease, by cause.")); err != nil {
		return nil, err
	}
	if t.stale, err = m.Int64Counter("fencekit.lock.stale", metric.WithUnit("{write}"),
		metric.WithDescription("Fenced writes refused because a newer token had written.")); err != nil {
		return nil, err
	}
	if t.backendDuration, err = m.Float64Histogram("fencekit.lock.backend.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of each lock backend call, by operation and outcome."),
		metric.WithExplicitBucketBoundaries(seconds...)); err != nil {
		return nil, err
	}
	if t.storeDuration, err = m.Float64Histogram("fencekit.store.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of each fenced store call, by operation and outcome."),
		metric.WithExplicitBucketBoundaries(seconds...)); err != nil {
		return nil, err
	}
	return t, nil
}

// lockAttrs returns the metric attributes of a lock event: extra, plus the
// lock name when Options.LockNames is on.
func (t *Telemetry) lockAttrs(name string, extra ...attribute.KeyValue) metric.MeasurementOption {
	if t.lockNames {
		extra = append(extra, attrLock.String(name))
	}
	return metric.WithAttributes(extra...)
}
