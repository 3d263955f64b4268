package containers

import (
	"context"
	"fmt"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// RedisImageEnv overrides DefaultRedisImage.
const RedisImageEnv = "FENCEKIT_REDIS_IMAGE"

// DefaultRedisImage is the official image the Redis container runs.
const DefaultRedisImage = "redis:7"

var redisContainer started

// RedisURL returns the URL of a Redis container shared by every test of the
// test binary, started on the first call. Tests must keep to keys under a
// prefix of their own (testkit.RedisPrefix). Without Docker, t is skipped,
// or failed under FENCEKIT_REQUIRE_CONTAINERS=1.
func RedisURL(t testing.TB) string {
	t.Helper()
	url, err := redisContainer.get(func(ctx context.Context) (string, error) {
		img := image(RedisImageEnv, DefaultRedisImage)
		ctr, err := tcredis.Run(ctx, img)
		if err != nil {
			if ctr != nil {
				_ = testcontainers.TerminateContainer(ctr)
			}
			return "", fmt.Errorf("redis container %s: %w", img, err)
		}
		return ctr.ConnectionString(ctx)
	})
	if err != nil {
		unavailable(t, "Redis", err)
	}
	// CI greps for "path:" to show which path each test took.
	t.Logf("path: Redis container, image %s, at %s", image(RedisImageEnv, DefaultRedisImage), url)
	return url
}
