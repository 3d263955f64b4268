package lab

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

func TestScenariosOnMemory(t *testing.T) {
	var out bytes.Buffer
	if code := runScenarios(&out, "memory", 50*time.Millisecond, time.Minute); code != 0 {
		t.Fatalf("exit code %d; output:\n%s", code, out.String())
	}
	for i := 1; i <= ScenarioCount(); i++ {
		if !strings.Contains(out.String(), fmt.Sprintf("\n%d. ", i)) {
			t.Errorf("scenario %d missing from output:\n%s", i, out.String())
		}
	}
	if strings.Contains(out.String(), "MISMATCH") || strings.Contains(out.String(), "ERROR") {
		t.Errorf("unexpected outcome:\n%s", out.String())
	}
}

// unfencedStore accepts every write, whatever its token: the store of a
// system without fencing. The lab must notice.
type unfencedStore struct{ *memory.Store }

func (s unfencedStore) Put(ctx context.Context, key string, _ fence.Token, v []byte) error {
	return s.Store.Put(ctx, key, 1, v)
}

func (unfencedStore) Advance(context.Context, string, fence.Token) error { return nil }

func TestScenariosDetectAnUnfencedStore(t *testing.T) {
	RegisterBackend("unfenced-test", func(context.Context) (lock.Backend, fence.Store, func(), error) {
		return memory.NewBackend(), unfencedStore{memory.NewStore()}, func() {}, nil
	})
	defer delete(backends, "unfenced-test")
	var out bytes.Buffer
	if code := runScenarios(&out, "unfenced-test", 50*time.Millisecond, time.Minute); code != 1 {
		t.Fatalf("exit code %d; want 1; output:\n%s", code, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if len(line) < 3 || line[1] != '.' {
			continue
		}
		// Only the fenced scenarios depend on the store refusing writes.
		wantMismatch := line[0] == '6' || line[0] == '7' || line[0] == '8' || line[0] == '9'
		if got := strings.Contains(line, "MISMATCH"); got != wantMismatch {
			t.Errorf("mismatch reported %v; want %v in line %q", got, wantMismatch, line)
		}
		// Unfenced, the paused transfer's writes land and money is made.
		if line[0] == '9' && !strings.Contains(line, "= 230 (was 200)") {
			t.Errorf("scenario 9 on an unfenced store: want the total to grow to 230; line %q", line)
		}
	}
}

func TestUnknownBackend(t *testing.T) {
	var out bytes.Buffer
	if code := runScenarios(&out, "nosuch", time.Second, time.Second); code != 2 {
		t.Fatalf("exit code %d; want 2", code)
	}
}

// The scenarios on the real backends, at the URLs testkit finds (the
// environment's in CI).
func TestScenariosOnRedis(t *testing.T) {
	url := testkit.RedisURL(t)
	old := *redisURL
	*redisURL = url
	defer func() { *redisURL = old }()
	runOn(t, "redis")
}

func TestScenariosOnPostgres(t *testing.T) {
	url := testkit.PostgresURL(t)
	old := *postgresURL
	*postgresURL = url
	defer func() { *postgresURL = old }()
	runOn(t, "postgres")
}

func runOn(t *testing.T, backend string) {
	t.Helper()
	var out bytes.Buffer
	code := runScenarios(&out, backend, 100*time.Millisecond, time.Minute)
	t.Logf("fencelab -backend %s:\n%s", backend, out.String())
	if code != 0 || !strings.Contains(out.String(), fmt.Sprintf("all %d scenarios behaved as expected", ScenarioCount())) {
		t.Fatalf("exit code %d; output:\n%s", code, out.String())
	}
}
