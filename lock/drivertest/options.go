package drivertest

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// An Option tells the suite a fact about the backend under test that the
// suite cannot learn by calling it. Pass options to Run (or to Checks, for
// the checks one by one). Options are data handed to the suite, never
// methods it looks for on the backend, so a wrapper around the backend
// (tracing, a struct embedding driver.Backend) keeps them.
type Option func(*config)

// config is what the options say; its zero value is a backend with no
// declarations.
type config struct {
	// granularity is the declared TTL granularity, or 0.
	granularity time.Duration
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return c
}

// TTLGranularity declares that the backend's server keeps TTLs in the
// coarse unit d, such as etcd's whole-second leases. Such a backend must
// round every TTL up to d, so that a lease never ends before the TTL asked
// for. The checks then accept a reported remaining TTL up to d off either
// way (a coarse server may also report the remaining time rounded down),
// use TTLs of at least d where the Client must keep or lose a lease, and
// let fewer leases expire in TokensMonotonicUnderContention; they still
// fail a lease that ends before its TTL, or a reported TTL further off.
// Without it, or with d at or below 0, a backend is judged to within 5 ms.
func TTLGranularity(d time.Duration) Option {
	return func(c *config) { c.granularity = max(d, 0) }
}

// configKey keys the config in the context a check runs with.
type configKey struct{}

// bind returns check, run with c in its context: the checks find the
// options there (granularity), so that none needs them as an argument.
func (c config) bind(check Check) Check {
	run := check.Run
	check.Run = func(ctx context.Context, b driver.Backend, ns string) error {
		return run(context.WithValue(ctx, configKey{}, c), b, ns)
	}
	return check
}

// granularity is the TTL granularity declared for the backend a check runs
// on (TTLGranularity): that of the options Checks was given, or 0 for a
// check run without them (the suite's own tests run unexported checks
// directly).
func granularity(ctx context.Context) time.Duration {
	c, _ := ctx.Value(configKey{}).(config)
	return c.granularity
}
