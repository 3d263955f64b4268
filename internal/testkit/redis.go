package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisURLEnv names a running Redis server for tests (step 1), as a
// redis:// URL.
const RedisURLEnv = "FENCEKIT_REDIS_URL"

const redisHow = "set FENCEKIT_REDIS_URL or install redis-server"

// RedisURL returns the URL of a Redis server for t: the one named by
// FENCEKIT_REDIS_URL; else a throwaway local redis-server started on first
// use and shared by every test of the test binary, just as the server of
// the environment is. Every call in one binary (Redis, RedisURL, from a test
// or its subtests) thus names the same server. When neither is available,
// t is skipped, or failed under FENCEKIT_REQUIRE_BACKENDS=1.
//
// The server may be shared with other tests and other processes: keep to
// keys under a prefix of your own (Namespace) and never flush it. A test
// that restarts, pauses or reconfigures a server starts its own
// (NewRedisServer).
func RedisURL(t testing.TB) string {
	t.Helper()
	u, err := SharedRedisURL()
	if err != nil {
		t.Logf("testkit: no Redis: %v", err)
		Unavailable(t, "Redis", redisHow)
	}
	return u
}

// SharedRedisURL is RedisURL for code that runs outside any test, such as a
// TestMain preparing examples: the server of FENCEKIT_REDIS_URL, else the
// test binary's shared throwaway redis-server, started now; an error when
// there is neither.
func SharedRedisURL() (string, error) {
	if u := envURL(RedisURLEnv); u != "" {
		return u, nil
	}
	if redisServerBinary() == "" {
		return "", errors.New("no redis-server binary")
	}
	sharedRedis.once.Do(func() {
		sharedRedis.server, sharedRedis.watchdog, sharedRedis.err = startSharedRedis()
	})
	if sharedRedis.err != nil {
		return "", sharedRedis.err
	}
	return sharedRedis.server.URL(), nil
}

// Redis returns a client for RedisURL(t), checked with a PING and closed
// when t ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	return RedisAt(t, RedisURL(t))
}

// RedisAt returns a client for the Redis server at url, checked with a PING
// and closed when t ends.
func RedisAt(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("testkit: parse Redis URL %q: %v", url, err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("testkit: Redis at %s does not answer: %v", opt.Addr, err)
	}
	return c
}

// redisServerBinary returns the path of redis-server, or "" when there is
// none.
func redisServerBinary() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/opt/homebrew/bin/redis-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// RedisPrefix returns a fresh Namespace for keys on c and deletes every key
// under it when t ends, so that tests on a shared server leave nothing
// behind. c may be a *redis.Client or a *redis.ClusterClient (every master
// is scanned).
func RedisPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	ns := Namespace(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := redisDeletePrefix(ctx, c, ns); err != nil {
			t.Logf("testkit: delete Redis keys under %s: %v", ns, err)
		}
	})
	return ns
}

// redisDeletePrefix unlinks every key that starts with prefix, which must
// hold no glob characters.
func redisDeletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := node.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *redis.Client:
		return del(ctx, c)
	default:
		return fmt.Errorf("cannot scan a %T", c)
	}
}
