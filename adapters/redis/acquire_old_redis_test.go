package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/testkit"
)

// TestAcquireBranchBeforeRedis7 runs acquire.lua with its Redis 7 detection
// turned off, so that the branch servers before 7.0 take (GET, then SET or
// INCR; no SET ... GET) runs here too, on the same paths as the common
// one: the clock ahead, the counter ahead with and without an idle expiry,
// the owner's own lease, a held lease.
func TestAcquireBranchBeforeRedis7(t *testing.T) {
	t.Parallel()
	const detect = "local getset = redis.REDIS_VERSION_NUM ~= nil"
	if !strings.Contains(acquireLua, detect) {
		t.Fatalf("acquire.lua no longer detects Redis 7 with %q", detect)
	}
	old := goredis.NewScript(strings.Replace(acquireLua, detect, "local getset = false", 1))
	c := testkit.Redis(t)
	ctx := testkit.Context(t)
	ns := testkit.RedisPrefix(t, c)
	lease, counter := ns+":{old}:lease", ns+":{old}:counter"
	acquire := func(owner string, idle int64) any {
		t.Helper()
		v, err := old.Run(ctx, c, []string{lease, counter}, owner, 60000, idle, "").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	token := func(v any) int64 {
		t.Helper()
		s, ok := v.(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if !ok || err != nil {
			t.Fatalf("reply %#v is not a token", v)
		}
		return n
	}
	pttl := func(key string) time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// Clock ahead (no counter): the token is the server time in µs.
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	first := token(acquire("a", 3600000))
	if first < before.UnixMicro() || c.Get(ctx, counter).Val() != strconv.FormatInt(first, 10) {
		t.Fatalf("clock token %d, server time before %d, counter %q", first, before.UnixMicro(), c.Get(ctx, counter).Val())
	}
	if d := pttl(counter); d <= 59*time.Minute || d > time.Hour {
		t.Errorf("counter expiry %v, want an hour", d)
	}
	// The owner's own lease: same token. Someone else: the PTTL.
	if again := token(acquire("a", 3600000)); again != first {
		t.Errorf("owner's acquire gave %d, want %d", again, first)
	}
	if ms, ok := acquire("b", 3600000).(int64); !ok || ms <= 0 {
		t.Errorf("held lease: reply %v, want its PTTL", ms)
	}
	c.Del(ctx, lease)

	// Counter ahead, with and without an expiry.
	for _, idle := range []int64{3600000, 0} {
		start := int64(1<<53 + 1)
		c.Set(ctx, counter, strconv.FormatInt(start, 10), 0)
		if got := token(acquire("c", idle)); got != start+1 {
			t.Errorf("idle %d: token %d, want %d", idle, got, start+1)
		}
		d := pttl(counter)
		if idle == 0 && d != -1 {
			t.Errorf("a counter that never expires has PTTL %v", d)
		}
		if idle > 0 && (d <= 59*time.Minute || d > time.Hour) {
			t.Errorf("counter expiry %v, want an hour", d)
		}
		c.Del(ctx, lease)
	}
	// Clock ahead again, never expiring: SET without PX.
	c.Del(ctx, counter)
	token(acquire("d", 0))
	if d := pttl(counter); d != -1 {
		t.Errorf("a counter that never expires has PTTL %v", d)
	}
	c.Del(ctx, lease, counter)
}
