package lock

import (
	"context"
	"log/slog"
)

// SlogObserver returns an Observer (for Options.Observer) that writes one
// record to logger per event, with the message "lock " and the event's
// kind ("lock acquired", "lock lost") and these attributes, each only when
// it applies:
//
//	lock      the lock name
//	token     the lease's token (for stale, the refused token)
//	metadata  the holder metadata the lease was acquired with
//	key       for stale, the key or row that refused the write
//	cause     Event.Cause: not-held, deadline, late-reply, renewal-error,
//	          held, timeout, transient, stale
//	error     the underlying error
//	attempt   for retrying, the attempt that failed; for acquired, the one
//	          that succeeded
//	elapsed   for acquired, the time the acquiring call took, backoff
//	          included
//
// Levels: lost and stale are Warn (work may have overlapped a newer
// holder's, or was refused), renewal-failed is Warn too (a loss may be
// coming), acquired and released are Info, extended and retrying Debug. A
// nil logger means slog.Default(). The records are written on the goroutine
// that reports the event, so the handler must not block for long (see
// Options.Observer).
func SlogObserver(logger *slog.Logger) func(Event) {
	if logger == nil {
		logger = slog.Default()
	}
	return func(e Event) {
		level := slog.LevelInfo
		switch e.Kind {
		case EventLost, EventStale, EventRenewalFailed:
			level = slog.LevelWarn
		case EventExtended, EventRetrying:
			level = slog.LevelDebug
		}
		ctx := context.Background()
		if !logger.Enabled(ctx, level) {
			return
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs, slog.String("lock", e.Name))
		if e.Token != 0 {
			attrs = append(attrs, slog.Int64("token", int64(e.Token)))
		}
		if e.Metadata != "" {
			attrs = append(attrs, slog.String("metadata", e.Metadata))
		}
		if e.Key != "" {
			attrs = append(attrs, slog.String("key", e.Key))
		}
		if c := e.Cause(); c != "" {
			attrs = append(attrs, slog.String("cause", c))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		if e.Attempt > 0 {
			attrs = append(attrs, slog.Int("attempt", e.Attempt))
		}
		if e.Kind == EventAcquired {
			attrs = append(attrs, slog.Duration("elapsed", e.Elapsed))
		}
		logger.LogAttrs(ctx, level, "lock "+e.Kind.String(), attrs...)
	}
}
