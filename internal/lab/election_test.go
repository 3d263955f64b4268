package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// runElection runs `fencelab election` with args and returns its exit code
// and output.
func runElection(t *testing.T, args ...string) (int, string) {
	t.Helper()
	// The flags are the package's: leave them as they were for other tests.
	oldBackend, oldTTL, oldRedis, oldPG := *backendName, *ttlFlag, *redisURL, *postgresURL
	defer func() { *backendName, *ttlFlag, *redisURL, *postgresURL = oldBackend, oldTTL, oldRedis, oldPG }()
	var out, errOut bytes.Buffer
	code := runElectionCmd(args, &out, &errOut)
	t.Logf("fencelab election %s:\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	return code, out.String()
}

func wantElectionOK(t *testing.T, args ...string) {
	t.Helper()
	code, out := runElection(t, args...)
	if code != 0 || !strings.Contains(out, "refused, the fence is at") || !strings.Contains(out, "the election behaved as expected") {
		t.Fatalf("exit code %d; want 0 and the refusal; output:\n%s", code, out)
	}
}

func TestElectionCommandMemory(t *testing.T) {
	wantElectionOK(t, "-backend", "memory", "-ttl", "300ms")
}

func TestElectionCommandRedis(t *testing.T) {
	wantElectionOK(t, "-backend", "redis", "-redis-url", testkit.RedisURL(t), "-ttl", "300ms")
}

func TestElectionCommandPostgres(t *testing.T) {
	wantElectionOK(t, "-backend", "postgres", "-postgres-url", testkit.PostgresURL(t), "-ttl", "300ms")
}

// On a store that accepts every write, the old leader's write lands: the
// command must say so and exit 1.
func TestElectionCommandDetectsAnUnfencedStore(t *testing.T) {
	RegisterBackend("unfenced-election-test", func(context.Context) (driver.Backend, fence.Store, func(), error) {
		return memory.NewBackend(), unfencedStore{memory.NewStore()}, func() {}, nil
	})
	defer delete(backends, "unfenced-election-test")
	code, out := runElection(t, "-backend", "unfenced-election-test", "-ttl", "300ms")
	if code != 1 || !strings.Contains(out, "FAILED: A's write after its pause") {
		t.Fatalf("exit code %d; want 1 and the accepted stale write reported; output:\n%s", code, out)
	}
}

func TestElectionCommandUsage(t *testing.T) {
	if code, _ := runElection(t, "extra"); code != 2 {
		t.Fatalf("exit code %d for an unexpected argument; want 2", code)
	}
	if code, _ := runElection(t, "-backend", "nosuch"); code != 2 {
		t.Fatalf("exit code %d for an unknown backend; want 2", code)
	}
}
