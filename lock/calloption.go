package lock

import (
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// CallOption changes one call of Acquire, TryAcquire, Do or TryDo: it
// overrides the Client's Options for that call only, and for the lease that
// call acquires. A call whose option is invalid (nil, or a value out of
// range) returns an error matching ErrInvalid and sends nothing.
//
// The TTL has no option: it is an argument of every call already.
type CallOption func(*callOptions)

// callOptions is what a call's options decide: the Client's Options with the
// call's values applied, and the first invalid value, if any.
type callOptions struct {
	opts         Options
	keepAliveSet bool // WithKeepAlive was given
	err          error
}

// WithMaxAttempts bounds this call's attempts to acquire, as
// Options.MaxAttempts does for every call; 0 means no bound other than the
// context, even if the Client has one. A negative n is invalid.
// TryAcquire and TryDo make one attempt whatever it says.
func WithMaxAttempts(n int) CallOption {
	return func(o *callOptions) {
		if n < 0 {
			o.fail(driver.Invalid("max attempts %d is negative", n))
			return
		}
		o.opts.MaxAttempts = n
	}
}

// WithMaxUnreachable bounds how long this call keeps trying while the
// backend is unreachable, as Options.MaxUnreachable does for every call; 0
// means no bound other than the context and the attempts, even if the
// Client has one. A negative d is invalid. Waiting for a holder is never
// bounded by it.
func WithMaxUnreachable(d time.Duration) CallOption {
	return func(o *callOptions) {
		switch {
		case d < 0:
			o.fail(driver.Invalid("max unreachable %v is negative", d))
		case d == 0:
			o.opts.MaxUnreachable = -1 // Options' spelling of "no bound"
		default:
			o.opts.MaxUnreachable = d
		}
	}
}

// WithKeepAlive turns the keep-alive of this call's lease on or off,
// whatever Options.KeepAlive says. Do and TryDo keep their lease alive
// unless this says false: then the lease ends at its local deadline, fn's
// context with it, and Do reports the loss if fn was still running.
func WithKeepAlive(on bool) CallOption {
	return func(o *callOptions) {
		o.opts.KeepAlive = on
		o.keepAliveSet = true
	}
}

// WithKeepAliveInterval sets the fraction of the TTL between renewals of this
// call's lease, as Options.KeepAliveInterval does for every call; it also
// governs the checks of that lease's Extend. It must be in (0, 1), and a
// kept-alive lease's first renewal must fall before its local deadline.
func WithKeepAliveInterval(fraction float64) CallOption {
	return func(o *callOptions) {
		if !(fraction > 0 && fraction < 1) { // NaN too
			o.fail(driver.Invalid("keep-alive interval %v is outside (0, 1)", fraction))
			return
		}
		o.opts.KeepAliveInterval = fraction
	}
}

func (o *callOptions) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// forCall returns the Client that serves one call, and whether its lease is
// kept alive: c itself when the call has no options, otherwise a copy whose
// Options the call's options override. The lease keeps that copy, so it
// renews on the call's schedule. Unless WithKeepAlive says otherwise, the
// lease is kept alive when Options.KeepAlive or alwaysKeepAlive (Do's
// default) says so.
func (c *Client) forCall(alwaysKeepAlive bool, opts []CallOption) (*Client, bool, error) {
	if err := c.usable(); err != nil {
		return nil, false, err
	}
	keepAlive := alwaysKeepAlive || c.opts.KeepAlive
	if len(opts) == 0 {
		return c, keepAlive, nil
	}
	o := callOptions{opts: c.opts}
	for i, opt := range opts {
		if opt == nil {
			return nil, false, driver.Invalid("call option %d is nil", i)
		}
		opt(&o)
	}
	if o.err != nil {
		return nil, false, o.err
	}
	if o.keepAliveSet {
		keepAlive = o.opts.KeepAlive
	}
	cc := *c // every field, should Client grow more
	cc.opts = o.opts
	return &cc, keepAlive, nil
}
