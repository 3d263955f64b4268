package lab

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/servers"
	"github.com/fencekit/fencekit/internal/testkit"
)

// killsIn returns the number of server kills the report line counts.
func killsIn(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`server kills: (\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no server kills line:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// chaosWithKills runs the chaos command with server kills and checks that
// servers were killed and nothing was violated.
func chaosWithKills(t *testing.T, args ...string) string {
	t.Helper()
	code, out := chaosCLI(t, args...)
	if code == 2 && strings.Contains(out, servers.ErrNoBinary.Error()) {
		testkit.Unavailable(t, "server binaries", out)
	}
	if code != 0 || !strings.Contains(out, "no violation") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if n := killsIn(t, out); n < 1 {
		t.Fatalf("%d server kills, want at least 1:\n%s", n, out)
	}
	for _, want := range []string{"stale writes accepted (must be 0)  0", "lost increments (must be 0)        0", "token regressions (must be 0)      0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("\n%s", out)
	return out
}

// The Redis lock server is killed (SIGKILL) and restarted empty several
// times while workers increment counters on a second redis-server behind
// the fault proxy: every lease and counter vanishes, tokens come from the
// server clock, and the fenced store still accepts no stale write and loses
// no increment.
func TestChaosKillServerRedis(t *testing.T) {
	out := chaosWithKills(t, "-backend", "redis", "-duration", "2s", "-kill-server-every", "400ms", "-kill-downtime", "100ms", "-fault-every", "200ms")
	if !strings.Contains(out, "restarted without persistence") || !strings.Contains(out, "proxy 127.0.0.1:") {
		t.Fatalf("not a kill of the lock server behind the proxy:\n%s", out)
	}
}

// PostgreSQL, holding leases and counters, is stopped in immediate mode and
// restarted (crash recovery) several times during the run.
func TestChaosKillServerPostgres(t *testing.T) {
	out := chaosWithKills(t, "-backend", "postgres", "-duration", "4s", "-kill-server-every", "500ms", "-kill-downtime", "100ms", "-fault-every", "300ms")
	if !strings.Contains(out, "immediate stop") {
		t.Fatalf("not an immediate stop:\n%s", out)
	}
}

func TestChaosKillServerUsage(t *testing.T) {
	if code, out := chaosCLI(t, "-backend", "memory", "-kill-server-every", "1s"); code != 2 || !strings.Contains(out, "no server to kill") {
		t.Fatalf("memory backend: exit %d\n%s", code, out)
	}
	if code, out := chaosCLI(t, "-backend", "redis", "-kill-server-every", "-1s"); code != 2 || !strings.Contains(out, "must not be negative") {
		t.Fatalf("negative interval: exit %d\n%s", code, out)
	}
}
