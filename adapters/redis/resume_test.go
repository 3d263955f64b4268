package redis_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// TestResumeCost: once its script is cached, Resume is one round trip, as
// Extend is, and runs the same number of commands inside Redis as Extend
// (HMGET instead of HGET, and PEXPIRE) when the owner holds the lock, one
// (HMGET) when it does not. Client.Resume over the Backend is that one round
// trip too.
func TestResumeCost(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	c, rt := counted(t, srv.Addr())
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, nil)
	a, other := newOwner(t), newOwner(t)

	// Warm up: connect, cache the scripts.
	tok, err := acquire(ctx, b, "job", a, time.Minute)
	require.NoError(t, err)
	require.NoError(t, extend(ctx, b, "job", a, time.Minute))
	_, err = resume(ctx, b, "job", a, time.Minute)
	require.NoError(t, err)
	rt.take()

	commands := func(what string, op func() error) map[string]int64 {
		t.Helper()
		require.NoError(t, c.ConfigResetStat(ctx).Err())
		rt.take()
		require.NoError(t, op(), what)
		n, sent := rt.take()
		require.Equal(t, 1, n, "%s: round trips %v", what, sent)
		info, err := c.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		rt.take()
		got := map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
			if !ok {
				continue
			}
			name, stats, _ := strings.Cut(rest, ":")
			if strings.HasPrefix(name, "config") || name == "info" || name == "evalsha" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			require.NoError(t, err, line)
			got[name] = n
		}
		t.Logf("%s: 1 round trip, commands %v", what, got)
		return got
	}
	extended := commands("Extend", func() error { return extend(ctx, b, "job", a, time.Minute) })
	resumed := commands("Resume", func() error {
		got, err := resume(ctx, b, "job", a, time.Minute)
		if err == nil && got != tok {
			err = errors.New("Resume changed the token")
		}
		return err
	})
	require.Equal(t, map[string]int64{"hget": 1, "pexpire": 1}, extended)
	require.Equal(t, map[string]int64{"hmget": 1, "pexpire": 1}, resumed)
	refused := commands("Resume (not held)", func() error {
		if _, err := resume(ctx, b, "job", other, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
			return errors.New("another owner resumed the lease")
		}
		return nil
	})
	require.Equal(t, map[string]int64{"hmget": 1}, refused)
	commands("Client.Resume", func() error {
		l, err := lock.New(b, nil).Resume(ctx, "job", a, time.Minute)
		if err == nil && l.Token() != tok {
			err = errors.New("Client.Resume changed the token")
		}
		return err
	})
}
