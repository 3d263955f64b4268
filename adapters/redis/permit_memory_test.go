package redis_test

import (
	"strings"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/internal/testkit/require"
)

// TestPermitMemoryUsage logs what a permit name costs in Redis (MEMORY
// USAGE, for docs/redis.md): its counter alone when idle, and its keys with
// one permit and one waiter. It asserts only that an idle name is its
// counter alone.
func TestPermitMemoryUsage(t *testing.T) {
	t.Parallel()
	c := testkit.Redis(t)
	ctx := testCtx(t)
	b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, c)})
	keys := b.PermitKeys("m")
	usage := func() (total int64, per map[string]int64) {
		per = map[string]int64{}
		for _, k := range keys {
			n, err := c.MemoryUsage(ctx, k).Result()
			if err == nil {
				per[k[strings.LastIndexByte(k, ':')+1:]] = n
				total += n
			}
		}
		return total, per
	}
	w, r := newOwner(t), newOwner(t)
	_, err := acquirePermit(ctx, b, "m", w, writer(time.Minute, 0))
	require.NoError(t, err)
	_, err = acquirePermit(ctx, b, "m", r, reader(time.Minute, time.Minute))
	requireHeld(t, err, "queued")
	busy, per := usage()
	t.Logf("a writer and a waiting reader: %d bytes %v", busy, per)
	require.NoError(t, leavePermitLine(ctx, b, "m", r))
	require.NoError(t, releasePermit(ctx, b, "m", w))
	idle, per := usage()
	t.Logf("idle: %d bytes %v", idle, per)
	require.Len(t, per, 1, "an idle name's keys: %v", per)
}
