package fencectltest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// PermitNames checks an adapter's PermitNames on b: it takes permits on
// names with characters that key escapes and patterns treat specially,
// frees one name, and checks that PermitNames returns the names in use
// under a prefix, sorted, and nothing else; idleMayStay allows the freed
// name too, for an adapter whose state outlives the permits (fencectl
// inspects each name and leaves idle ones out).
func PermitNames(t *testing.T, b driver.Backend, permitNames func(ctx context.Context, prefix string) ([]string, error), idleMayStay bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := lock.New(b, nil)
	const ttl = time.Minute
	odd := "jobs/a%2F*?[x]{y}"
	for _, take := range []func() (*lock.Lease, error){
		func() (*lock.Lease, error) { return c.Semaphore("jobs/b", 2).TryAcquire(ctx, ttl) },
		func() (*lock.Lease, error) { return c.RWLock(odd).TryAcquireRead(ctx, ttl) },
		func() (*lock.Lease, error) { return c.Semaphore("jobsx", 1).TryAcquire(ctx, ttl) },
		func() (*lock.Lease, error) { return c.Acquire(ctx, "jobs/lock", ttl) }, // a lock: not a permit name
	} {
		l, err := take()
		require.NoError(t, err)
		defer l.Release(context.Background())
	}
	freed, err := c.Semaphore("jobs/c", 1).TryAcquire(ctx, ttl)
	require.NoError(t, err)
	require.NoError(t, freed.Release(ctx))

	for prefix, want := range map[string][]string{
		"jobs/":   {odd, "jobs/b"},
		"jobs/a%": {odd},
		"":        {odd, "jobs/b", "jobsx"},
		"none":    nil,
	} {
		got, err := permitNames(ctx, prefix)
		require.NoError(t, err)
		if idleMayStay {
			got = slices.DeleteFunc(got, func(n string) bool { return n == "jobs/c" })
		}
		if len(got) == 0 {
			got = nil
		}
		require.Equal(t, want, got, "PermitNames(%q)", prefix)
	}
}
