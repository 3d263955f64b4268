package lock

import (
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// Options configures a Client. A nil *Options means the defaults.
type Options struct {
	// MinBackoff is the first backoff ceiling between attempts of Acquire.
	// Default 10ms.
	MinBackoff time.Duration
	// MaxBackoff caps the backoff ceiling, which doubles after every failed
	// attempt. Default 1s.
	MaxBackoff time.Duration
	// MaxAttempts bounds Acquire's attempts; 0 means no bound other than the
	// context. WithMaxAttempts overrides it for one call.
	MaxAttempts int
	// MaxUnreachable bounds how long Acquire, TryAcquire, Do and TryDo keep
	// trying while the backend is unreachable: while no attempt gets an
	// answer about the lock (the lock, or ErrHeld). A refused, reset or
	// timed-out connection, or a transient server reply (Redis LOADING, a
	// PostgreSQL serialization failure), is no such answer. When the bound
	// passes they give up with an error matching ErrNotAcquired,
	// ErrUnreachable and the last attempt's error, even under
	// context.Background. Waiting for a holder is not bounded by it: the
	// count starts again at the first attempt after an ErrHeld reply (the
	// pause before it is the Client's own). 0 means a minute: long enough
	// to ride out a server restart or a failover (Redis Sentinel's default
	// down-after-milliseconds alone is 30 s), short enough that a wrong
	// address or a server that is down is reported within a minute instead
	// of never. A negative value means no bound other than the context and
	// MaxAttempts.
	// WithMaxUnreachable overrides it for one call.
	MaxUnreachable time.Duration

	// DriftFactor is the share of the TTL subtracted from a lease's local
	// deadline for clock drift between this process and the backend.
	// 0 means the default, 0.01; every value in (0, 1) is used as given.
	// Any other value (negative, 1 or more, NaN) makes every call that
	// takes or renews a lease fail with ErrInvalid, sending nothing, and so
	// does a factor so close to 1 that a TTL's local deadline would not
	// come after its start, or its keep-alive renewal would come after
	// that deadline.
	DriftFactor float64
	// DriftMin is added to the drift margin. Default 2ms.
	DriftMin time.Duration

	// KeepAlive makes Acquire and TryAcquire start a keep-alive for every
	// lease: it renews the lease every KeepAliveInterval of its TTL. Do
	// and TryDo keep their lease alive in any case. WithKeepAlive overrides
	// it for one call.
	KeepAlive bool
	// KeepAliveInterval is the fraction of the TTL between renewals. 0
	// means the default, 1/3. A lease that is kept alive needs its first
	// renewal to fall before its local deadline (TTL minus the drift
	// margin); an acquire or Extend whose TTL and interval break that rule
	// is refused with ErrInvalid, as is an interval outside (0, 1).
	KeepAliveInterval float64

	// Metadata, when set, is stored with every lease the Client acquires and
	// reported by Client.Inspect as Holder.Metadata, so that an operator can
	// tell which process holds a lock: an instance name, or
	// DefaultMetadata() for "host=<hostname> pid=<pid>". It must be UTF-8
	// without NUL, at most 1024 bytes; otherwise Acquire, TryAcquire and Do
	// refuse with ErrInvalid and send nothing. When it is empty, the
	// metadata of the acquiring context (ContextWithMetadata) is sent.
	// Permits keep none.
	Metadata string

	// Queue configures queued waiting: how long a waiter's place in line
	// outlives it, or polling instead.
	Queue QueueOptions

	// Observer, when set, is called for every event whose field it sets:
	// those of a lease (acquired, extended, renewal failed, released,
	// lost, stale) and each acquire attempt that failed and will be
	// retried. See Observer for the order and the goroutines of its calls.
	// New copies it: setting its fields later has no effect on the Client.
	Observer *Observer
}

// defaultMaxUnreachable is Options.MaxUnreachable's default.
const defaultMaxUnreachable = time.Minute

func (o *Options) withDefaults() Options {
	var v Options
	if o != nil {
		v = *o
	}
	if v.Observer != nil {
		obs := *v.Observer
		v.Observer = &obs
	}
	if v.MinBackoff <= 0 {
		v.MinBackoff = 10 * time.Millisecond
	}
	if v.MaxBackoff <= 0 {
		v.MaxBackoff = time.Second
	}
	if v.MaxBackoff < v.MinBackoff {
		v.MaxBackoff = v.MinBackoff
	}
	if v.DriftFactor == 0 {
		v.DriftFactor = 0.01
	}
	if v.MaxUnreachable == 0 {
		v.MaxUnreachable = defaultMaxUnreachable
	}
	if v.DriftMin <= 0 {
		v.DriftMin = 2 * time.Millisecond
	}
	if v.KeepAliveInterval == 0 {
		v.KeepAliveInterval = 1.0 / 3
	}
	return v
}

// checkTTL refuses a TTL that can never yield a usable lease under these
// options: one whose local deadline (start + ttl - drift) is not after its
// start, or, when the lease is kept alive, whose first renewal would come
// after that deadline.
func (o *Options) checkTTL(ttl time.Duration, keepAlive bool) error {
	if ttl < driver.MinTTL {
		return driver.Invalid("ttl %v is below the minimum %v", ttl, driver.MinTTL)
	}
	if !(o.DriftFactor > 0 && o.DriftFactor < 1) { // NaN too
		return driver.Invalid("drift factor %v is outside (0, 1)", o.DriftFactor)
	}
	life := ttl - o.drift(ttl)
	if life <= 0 {
		return driver.Invalid("ttl %v is not longer than its drift margin %v: the lease would end locally before it began", ttl, o.drift(ttl))
	}
	if !keepAlive {
		return nil
	}
	if o.KeepAliveInterval <= 0 || o.KeepAliveInterval >= 1 {
		return driver.Invalid("keep-alive interval %v is outside (0, 1)", o.KeepAliveInterval)
	}
	if renew := o.renewEvery(ttl); renew >= life {
		return driver.Invalid("ttl %v: a renewal every %v would come after the local deadline, %v after the start", ttl, renew, life)
	}
	return nil
}

// unreachableBound is how long an acquiring call keeps trying without an
// answer about the lock; 0 means no bound.
func (o *Options) unreachableBound() time.Duration {
	return max(o.MaxUnreachable, 0)
}

// renewEvery is the pause between renewals of a lease with this ttl.
func (o *Options) renewEvery(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * o.KeepAliveInterval)
}

// drift is the margin subtracted from a lease's local deadline.
func (o *Options) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*o.DriftFactor) + o.DriftMin
}
