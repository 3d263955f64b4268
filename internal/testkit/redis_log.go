package testkit

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"
)

// RedisLogEnv, set to 1, keeps go-redis's own logging in test binaries.
const RedisLogEnv = "FENCEKIT_REDIS_LOG"

// go-redis reports dial failures ("connection pool: failed to dial after 5
// attempts") through a global logger that writes to stderr. Tests that reach
// an unreachable server on purpose would fill a passing run's output with
// lines that read as failures, so every test binary that imports testkit
// drops them, unless FENCEKIT_REDIS_LOG=1 (for debugging a failure). The
// errors themselves still reach the code that made the call.
func init() {
	if os.Getenv(RedisLogEnv) != "1" {
		redis.SetLogger(discardRedisLog{})
	}
}

// discardRedisLog is a go-redis logger that writes nothing.
type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
