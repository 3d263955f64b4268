package redis_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TestPermitTokensExact: a permit's token is minted as a lock's is, max(last
// + 1, server TIME in µs), exactly over the whole range (HINCRBY, read back
// as a string): a counter ahead of the clock counts on digit for digit up to
// fence.MaxToken, a counter at the top refuses the next permit and writes
// nothing, and so does a counter that is not a number.
func TestPermitTokensExact(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	cycle := func(name string, req driver.Request) driver.Grant {
		t.Helper()
		o := newOwner(t)
		p, err := acquirePermit(ctx, b, name, o, req)
		require.NoError(t, err, name)
		require.NoError(t, releasePermit(ctx, b, name, o), name)
		return p
	}

	before := time.Now().UnixMicro()
	p := cycle("clock", semaphore(2, time.Minute, 0))
	require.Greater(t, int64(p.Token), before-int64(time.Minute/time.Microsecond), "a token from the server clock")
	require.Greater(t, cycle("clock", semaphore(2, time.Minute, 0)).Token, p.Token)

	counter := b.PermitKeys("ahead")[0]
	for _, start := range []int64{1 << 53, 1<<60 + 1, math.MaxInt64 - 2} {
		require.NoError(t, c.HSet(ctx, counter, "last", strconv.FormatInt(start, 10)).Err())
		w := cycle("ahead", writer(time.Minute, 0))
		require.Equal(t, fence.Token(start+1), w.Token, "counter %d", start)
		r := cycle("ahead", reader(time.Minute, 0))
		require.Equal(t, fence.Token(start+2), r.Token, "counter %d", start)
		require.Equal(t, w.Token, r.PriorWriter, "the last writer, exact")
	}
	require.Equal(t, strconv.FormatInt(math.MaxInt64, 10), c.HGet(ctx, counter, "last").Val())
	_, err := acquirePermit(ctx, b, "ahead", newOwner(t), writer(time.Minute, 0))
	require.Error(t, err, "a permit past fence.MaxToken")
	require.True(t, strings.Contains(err.Error(), "no token above"), "%v", err)
	require.Zero(t, c.Exists(ctx, b.PermitKeys("ahead")[1:]...).Val(), "a refused permit wrote something")
	require.Equal(t, strconv.FormatInt(math.MaxInt64-1, 10), c.HGet(ctx, counter, "writer").Val(), "the last writer, untouched")

	junk := b.PermitKeys("junk")[0]
	require.NoError(t, c.HSet(ctx, junk, "last", "junk").Err())
	_, err = acquirePermit(ctx, b, "junk", newOwner(t), semaphore(1, time.Minute, 0))
	require.Error(t, err)
	require.False(t, errors.Is(err, lock.ErrHeld))
	require.Equal(t, "junk", c.HGet(ctx, junk, "last").Val())
	require.Zero(t, c.Exists(ctx, b.PermitKeys("junk")[1:]...).Val(), "a failed acquire left a permit")
}
