package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestDeadlineBoundsEveryCall sends every call through a proxy that holds
// the replies back, on a client with go-redis's default options: context
// timeouts off, so go-redis itself waits for its 3 s ReadTimeout (and then
// resends). Each call must return by its context's 100 ms deadline, with an
// error that matches context.DeadlineExceeded and says the outcome is
// unknown.
func TestDeadlineBoundsEveryCall(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	px := testkit.NewProxy(t, srv.Addr())
	c := goredis.NewClient(&goredis.Options{Addr: px.Addr()}) // the defaults
	t.Cleanup(func() { _ = c.Close() })
	require.False(t, c.Options().ContextTimeoutEnabled)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	s := fenceredis.NewStore(c, nil)
	o := newOwner(t)
	_, err := acquire(ctx, b, "job", o, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "k", 1, nil))

	px.SetLatency(faultproxy.Downstream, time.Hour)
	readTimeout := c.Options().ReadTimeout
	for name, op := range map[string]func(context.Context) error{
		"Acquire": func(ctx context.Context) error { _, err := acquire(ctx, b, "other", o, time.Minute); return err },
		"Extend":  func(ctx context.Context) error { return extend(ctx, b, "job", o, time.Minute) },
		"Release": func(ctx context.Context) error { return release(ctx, b, "job", o) },
		"Inspect": func(ctx context.Context) error { _, err := inspect(ctx, b, "job"); return err },
		"Put":     func(ctx context.Context) error { return s.Put(ctx, "k", 1, []byte("v")) },
		"Delete":  func(ctx context.Context) error { return s.Delete(ctx, "k", 1) },
		"Advance": func(ctx context.Context) error { return s.Advance(ctx, "k", 1) },
		"Get":     func(ctx context.Context) error { _, err := s.Get(ctx, "k"); return err },
	} {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		err := op(cctx)
		took := time.Since(start)
		cancel()
		// Not a speed check: without the adapter's bound the call takes at
		// least go-redis's ReadTimeout, 30 times the context's deadline.
		require.Less(t, took, readTimeout, "%s returned after %v", name, took)
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		require.ErrorContains(t, err, "outcome unknown", name)
		t.Logf("%-8s under a 100 ms deadline, replies held back: %v after %v", name, err, took.Round(time.Millisecond))
	}
}
