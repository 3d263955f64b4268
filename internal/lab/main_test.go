package lab

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
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
	RegisterBackend("unfenced-test", func(context.Context) (driver.Backend, fence.Store, func(), error) {
		return memory.NewBackend(), unfencedStore{memory.NewStore()}, func() {}, nil
	})
	defer delete(backends, "unfenced-test")
	var out bytes.Buffer
	if code := runScenarios(&out, "unfenced-test", 50*time.Millisecond, time.Minute); code != 1 {
		t.Fatalf("exit code %d; want 1; output:\n%s", code, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		num, _, ok := strings.Cut(line, ". ")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		// Only the fenced scenarios depend on the store refusing writes.
		wantMismatch := n >= 6
		if got := strings.Contains(line, "MISMATCH"); got != wantMismatch {
			t.Errorf("mismatch reported %v; want %v in line %q", got, wantMismatch, line)
		}
		// Unfenced, the paused transfer's writes land and money is made.
		if n == 9 && !strings.Contains(line, "= 230 (was 200)") {
			t.Errorf("scenario 9 on an unfenced store: want the total to grow to 230; line %q", line)
		}
		// Unfenced, the paused worker's late write overwrites the job
		// that worker 3 took over.
		if n == 10 && (!strings.Contains(line, "worker 1's late write: ok") || !strings.Contains(line, `job 1 "job 1 done by worker 1 (late)"`)) {
			t.Errorf("scenario 10 on an unfenced store: want worker 1's late write to land; line %q", line)
		}
		// Unfenced, the paused writer's late write lands under the
		// reader's live permit, and the fence tells the reader nothing.
		if n == 11 && (!strings.Contains(line, "A's late write under R's live permit: ok") || !strings.Contains(line, "R's check passes: true") || !strings.Contains(line, "unchanged: false") || !strings.Contains(line, "stale read detected: false")) {
			t.Errorf("scenario 11 on an unfenced store: want A's late write to land under the reader, its check to pass anyway, and the stale read missed; line %q", line)
		}
	}
	if _, err := Verdict(out.String()); err == nil {
		t.Errorf("Verdict passed a run with mismatches")
	}
}

// lockOnly is a lab backend without permits: it answers every permit
// request with driver.ErrUnsupported, having changed nothing.
type lockOnly struct{ driver.Backend }

func (b lockOnly) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Kind.Permit() {
		return driver.Grant{}, driver.ErrUnsupported
	}
	return b.Backend.Acquire(ctx, req)
}

// On a backend that answers ErrUnsupported for permits the semaphore and
// read-write scenarios are skipped, naming lock.ErrUnsupported, and the run
// still passes; Verdict says which were skipped and why.
func TestScenariosSkipPermitsOnErrUnsupported(t *testing.T) {
	RegisterBackend("lock-only-test", func(context.Context) (driver.Backend, fence.Store, func(), error) {
		return lockOnly{memory.NewBackend()}, memory.NewStore(), func() {}, nil
	})
	defer delete(backends, "lock-only-test")
	var out bytes.Buffer
	if code := runScenarios(&out, "lock-only-test", 50*time.Millisecond, time.Minute); code != 0 {
		t.Fatalf("exit code %d; want 0; output:\n%s", code, out.String())
	}
	skipped, err := Verdict(out.String())
	if err != nil {
		t.Fatalf("Verdict: %v; output:\n%s", err, out.String())
	}
	if want := "scenarios 10, 11 skipped: lock.ErrUnsupported"; !strings.HasPrefix(skipped, want) {
		t.Errorf("skipped = %q; want it to start with %q", skipped, want)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("all %d scenarios that ran behaved as expected; 2 skipped", ScenarioCount()-2)) {
		t.Errorf("the summary does not count the skipped scenarios:\n%s", out.String())
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
	skipped, err := Verdict(out.String())
	if code != 0 || err != nil {
		t.Fatalf("exit code %d, %v; output:\n%s", code, err, out.String())
	}
	// The semaphore and read-write scenarios need permits; on a backend
	// that answers ErrUnsupported for them they were skipped, and this
	// says so.
	t.Run("permit scenarios", func(t *testing.T) {
		if skipped != "" {
			t.Skip(skipped)
		}
	})
}
