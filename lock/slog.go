package lock

import (
	"context"
	"log/slog"
)

// SlogObserver returns an Observer (for Options.Observer), with every field
// set, that writes one record to logger per event, with the message "lock "
// and the event's kind ("lock acquired", "lock extended", "lock released",
// "lock lost", "lock stale", "lock renewal-failed", "lock retrying") and
// these attributes, each only when it applies:
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
// Observer). Each field logs as its own kind, whatever Event it is given.
func SlogObserver(logger *slog.Logger) *Observer {
	if logger == nil {
		logger = slog.Default()
	}
	log := func(kind eventKind, level slog.Level) func(Event) {
		msg := "lock " + kind.String()
		return func(e Event) {
			e.kind = kind // for Cause, when the caller made e itself
			logEvent(logger, level, msg, e)
		}
	}
	return &Observer{
		Acquired:      log(eventAcquired, slog.LevelInfo),
		Extended:      log(eventExtended, slog.LevelDebug),
		Released:      log(eventReleased, slog.LevelInfo),
		Lost:          log(eventLost, slog.LevelWarn),
		Stale:         log(eventStale, slog.LevelWarn),
		RenewalFailed: log(eventRenewalFailed, slog.LevelWarn),
		Retrying:      log(eventRetrying, slog.LevelDebug),
	}
}

// logEvent writes e's record for SlogObserver.
func logEvent(logger *slog.Logger, level slog.Level, msg string, e Event) {
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
	if e.kind == eventAcquired {
		attrs = append(attrs, slog.Duration("elapsed", e.Elapsed))
	}
	logger.LogAttrs(ctx, level, msg, attrs...)
}
