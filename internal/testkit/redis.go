package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Environment variables that choose the Redis server for tests.
const (
	// RedisURLEnv names a running server to use (step 1), as a redis:// URL.
	RedisURLEnv = "FENCEKIT_REDIS_URL"
	// RedisImageEnv overrides the Docker image of step 2.
	RedisImageEnv = "FENCEKIT_REDIS_IMAGE"
)

// DefaultRedisImage is the official image used when Docker is available and
// FENCEKIT_REDIS_IMAGE is not set.
const DefaultRedisImage = "redis:7"

const redisHow = "set FENCEKIT_REDIS_URL, run Docker, or install redis-server"

// redisDocker is the Redis container RedisURL starts at most once per test
// binary; testcontainers' reaper removes it when the binary exits.
var redisDocker struct {
	once sync.Once
	url  string
	err  error
}

// RedisURL returns the URL of a Redis server for t: the one named by
// FENCEKIT_REDIS_URL; else a container (shared by the test binary) when a
// healthy Docker provider answers quickly; else a throwaway local
// redis-server of t's own, stopped when t ends. When none is available, t is
// skipped, or failed under FENCEKIT_REQUIRE_BACKENDS=1.
//
// The server may be shared with other tests and other processes: keep to
// keys under a prefix of your own (Namespace) and never flush it.
func RedisURL(t testing.TB) string {
	t.Helper()
	if u := envURL(RedisURLEnv); u != "" {
		return u
	}
	redisDocker.once.Do(func() { redisDocker.url, redisDocker.err = redisContainer() })
	if redisDocker.err == nil {
		return redisDocker.url
	}
	if redisServerBinary() != "" {
		return NewRedisServer(t).URL()
	}
	t.Logf("testkit: no Redis: docker: %v; redis-server not found", redisDocker.err)
	Unavailable(t, "Redis", redisHow)
	return ""
}

// Redis returns a client for RedisURL(t), checked with a PING and closed
// when t ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	url := RedisURL(t)
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

// redisContainer starts a Redis container when a Docker provider is reachable
// and healthy, and returns its URL. It checks cheaply first, so that a
// machine without Docker costs nothing and logs nothing.
func redisContainer() (url string, err error) {
	if !dockerLikely() {
		return "", errors.New("no Docker socket and no DOCKER_HOST")
	}
	defer func() {
		// testcontainers panics in some setups without a usable Docker.
		if r := recover(); r != nil {
			url, err = "", fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", fmt.Errorf("docker provider: %w", err)
	}
	err = provider.Health(ctx)
	_ = provider.Close()
	if err != nil {
		return "", fmt.Errorf("docker provider unhealthy: %w", err)
	}

	image := envURL(RedisImageEnv)
	if image == "" {
		image = DefaultRedisImage
	}
	runCtx, runCancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer runCancel()
	ctr, err := tcredis.Run(runCtx, image)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return "", fmt.Errorf("redis container %s: %w", image, err)
	}
	// The container lives as long as the test binary; testcontainers'
	// reaper removes it afterwards.
	return ctr.ConnectionString(runCtx)
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
