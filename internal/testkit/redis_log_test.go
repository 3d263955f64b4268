package testkit

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestGoRedisDialFailuresNotLogged: a test binary that imports testkit and
// dials an unreachable Redis on purpose prints no go-redis log lines; with
// FENCEKIT_REDIS_LOG=1 it does (so the check is not vacuous). The dial runs
// in a child process, since go-redis's default logger writes to the stderr
// it found at start.
func TestGoRedisDialFailuresNotLogged(t *testing.T) {
	if os.Getenv("TESTKIT_DIAL_CHILD") == "1" {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: time.Second})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING to 127.0.0.1:1 answered")
		}
		return
	}
	child := func(logEnv string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGoRedisDialFailuresNotLogged$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTKIT_DIAL_CHILD=1", RedisLogEnv+"="+logEnv)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := child(""); strings.Contains(out, "failed to dial") {
		t.Fatalf("go-redis logged a dial failure:\n%s", out)
	}
	if out := child("1"); !strings.Contains(out, "failed to dial") {
		t.Fatalf("with %s=1 go-redis logged no dial failure:\n%s", RedisLogEnv, out)
	}
}
