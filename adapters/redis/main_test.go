package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/testkit"
)

// exampleOpts is the server the examples use: FENCEKIT_REDIS_URL, else
// the test binary's throwaway redis-server (testkit.SharedRedisURL).
var exampleOpts *goredis.Options

// exampleNamespace keeps one run's example keys apart from every other run.
var exampleNamespace = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "fk_example_" + hex.EncodeToString(b[:])
}()

// TestMain finds the examples' server. Examples cannot skip themselves, so
// when there is none they are skipped here with a note, unless
// FENCEKIT_REQUIRE_BACKENDS=1, under which they run and fail.
func TestMain(m *testing.M) {
	flag.Parse()
	url, err := testkit.SharedRedisURL()
	var opts *goredis.Options
	if err == nil {
		opts, err = goredis.ParseURL(url)
	}
	if err == nil {
		err = ping(opts)
	}
	if err == nil {
		exampleOpts = opts
	} else if os.Getenv(testkit.RequireEnv) != "1" {
		fmt.Fprintf(os.Stderr, "adapters/redis: examples skipped, no Redis (%v); set %s or install redis-server\n", err, testkit.RedisURLEnv)
		skip := "^Example$" // the examples that need a server
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
	}
	os.Exit(m.Run())
}

func ping(opts *goredis.Options) error {
	o := *opts
	o.MaxRetries = -1
	o.DialTimeout = time.Second
	c := goredis.NewClient(&o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}
