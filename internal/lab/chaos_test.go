package lab

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit"
)

// chaosCLI runs `fencelab chaos args...` and restores the flags it shares
// with main.
func chaosCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	saved := *backendName
	savedTTL := *ttlFlag
	savedRedis, savedPostgres := *redisURL, *postgresURL
	t.Cleanup(func() {
		*backendName, *ttlFlag, *redisURL, *postgresURL = saved, savedTTL, savedRedis, savedPostgres
	})
	var out, errOut bytes.Buffer
	code := runChaos(args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// unfencedLoses runs an unfenced chaos run (args) with seeds 1 to 3 (see
// testkit.SomeSeedShows) until one exits 1 reporting lost increments and
// every string in want.
func unfencedLoses(t *testing.T, what string, want []string, args ...string) {
	t.Helper()
	testkit.SomeSeedShows(t, 3, what+": an unfenced run must exit 1 with lost increments", func(seed uint64) (bool, string) {
		code, out := chaosCLI(t, append(args, "-seed", strconv.FormatUint(seed, 10))...)
		return code == 1 && containsAll(out, append(want, "increments lost")), fmt.Sprintf("exit %d:\n%s", code, out)
	})
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestChaosCommandMemory(t *testing.T) {
	code, out := chaosCLI(t, "-backend", "memory", "-duration", "1s", "-ttl", "30ms", "-workers", "4", "-seed", "7")
	if code != 0 || !strings.Contains(out, "no violation") || !strings.Contains(out, "seed 7") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"acquisitions", "lease overlaps observed", "stale writes refused",
		"stale writes accepted (must be 0)  0", "lost increments (must be 0)        0", "linearizable"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestChaosCommandUnfencedExitsNonZero(t *testing.T) {
	unfencedLoses(t, "-unfenced", []string{"NOT LINEARIZABLE"}, "-backend", "memory", "-duration", "1s", "-ttl", "30ms", "-workers", "5", "-keys", "2", "-unfenced")
}

func TestChaosCommandUsage(t *testing.T) {
	if code, out := chaosCLI(t, "-workers"); code != 2 {
		t.Fatalf("missing flag value: exit %d\n%s", code, out)
	}
	if code, out := chaosCLI(t, "-backend", "nosuch"); code != 2 || !strings.Contains(out, "unknown backend") {
		t.Fatalf("unknown backend: exit %d\n%s", code, out)
	}
	if code, out := chaosCLI(t, "extra"); code != 2 {
		t.Fatalf("extra argument: exit %d\n%s", code, out)
	}
	if code, _ := chaosCLI(t, "-h"); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
}

// Through the in-process proxy, on the servers testkit provides.
func TestChaosCommandBehindProxy(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		url := testkit.RedisURL(t)
		code, out := chaosCLI(t, "-backend", "redis", "-redis-url", url, "-duration", "1s", "-fault-every", "100ms")
		if code != 0 || !strings.Contains(out, "proxy 127.0.0.1:") || !strings.Contains(out, "no violation") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		url := testkit.PostgresURL(t)
		code, out := chaosCLI(t, "-backend", "postgres", "-postgres-url", url, "-duration", "1s", "-fault-every", "100ms")
		if code != 0 || !strings.Contains(out, "proxy 127.0.0.1:") || !strings.Contains(out, "no violation") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

func TestChaosCommandSets(t *testing.T) {
	code, out := chaosCLI(t, "-backend", "memory", "-sets", "-duration", "1s", "-ttl", "30ms", "-workers", "5", "-seed", "8")
	if code != 0 || !strings.Contains(out, "no violation") || !strings.Contains(out, "4 keys") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"sets of 2-3 names with DoMulti", "sets acquired", "two live holders (must be 0)       0",
		"lost increments (must be 0)        0", "none in the last (no deadlock)", "(limit 5s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	unfencedLoses(t, "unfenced sets", nil, "-backend", "memory", "-sets", "-duration", "1s", "-ttl", "30ms", "-workers", "5", "-unfenced", "-polling")
	if code, out := chaosCLI(t, "-backend", "memory", "-sets", "-shape", "rw"); code != 2 || !strings.Contains(out, "-shape lock") {
		t.Fatalf("sets of permits: exit %d, want 2\n%s", code, out)
	}
	if code, out := chaosCLI(t, "-backend", "memory", "-sets", "-keys", "1"); code != 2 || !strings.Contains(out, "at least 2 keys") {
		t.Fatalf("sets over one key: exit %d, want 2\n%s", code, out)
	}
}

func TestChaosCommandTransfer(t *testing.T) {
	code, out := chaosCLI(t, "-backend", "memory", "-transfer", "-duration", "1s", "-ttl", "30ms", "-workers", "5", "-seed", "9")
	if code != 0 || !strings.Contains(out, "no violation") || !strings.Contains(out, "transfers under sets") ||
		!strings.Contains(out, "transfers torn (one half landed)") || !strings.Contains(out, "lost updates (must be 0)           0") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
