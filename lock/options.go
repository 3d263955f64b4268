package lock

import "time"

// Options configures a Client. A nil *Options means the defaults.
type Options struct {
	// MinBackoff is the first backoff ceiling between attempts of Acquire.
	// Default 10ms.
	MinBackoff time.Duration
	// MaxBackoff caps the backoff ceiling, which doubles after every failed
	// attempt. Default 1s.
	MaxBackoff time.Duration
	// MaxAttempts bounds Acquire's attempts; 0 means no bound other than the
	// context.
	MaxAttempts int

	// DriftFactor is the share of the TTL subtracted from a lease's local
	// deadline for clock drift between this process and the backend.
	// Default 0.01.
	DriftFactor float64
	// DriftMin is added to the drift margin. Default 2ms.
	DriftMin time.Duration

	// KeepAlive makes Acquire and TryAcquire start a keep-alive for every
	// lease: it renews the lease every KeepAliveInterval of its TTL. Do
	// always keeps its lease alive.
	KeepAlive bool
	// KeepAliveInterval is the fraction of the TTL between renewals, in
	// (0, 1). Default 1/3.
	KeepAliveInterval float64

	// Observer, when set, is called synchronously for every lease event.
	// It must not block.
	Observer func(Event)
}

func (o *Options) withDefaults() Options {
	var v Options
	if o != nil {
		v = *o
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
	if v.DriftFactor <= 0 || v.DriftFactor >= 0.5 {
		v.DriftFactor = 0.01
	}
	if v.DriftMin <= 0 {
		v.DriftMin = 2 * time.Millisecond
	}
	if v.KeepAliveInterval <= 0 || v.KeepAliveInterval >= 1 {
		v.KeepAliveInterval = 1.0 / 3
	}
	return v
}

// drift is the margin subtracted from a lease's local deadline.
func (o *Options) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*o.DriftFactor) + o.DriftMin
}
