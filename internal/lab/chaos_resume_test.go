package lab

import (
	"strings"
	"testing"
)

func TestChaosCommandResume(t *testing.T) {
	code, out := chaosCLI(t, "-backend", "memory", "-resume", "-duration", "1s", "-ttl", "30ms", "-workers", "4", "-keys", "2", "-pause", "0.3", "-seed", "9")
	if code != 0 || !strings.HasSuffix(out, "no violation\n") || !strings.Contains(out, "each lease resumed by a new Client") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"refused, lapsed (ErrNotHeld)", "token not the adopted one's (must be 0)    0",
		"stale writes accepted (must be 0)  0", "lost increments (must be 0)        0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	unfencedLoses(t, "-resume -unfenced", nil, "-backend", "memory", "-resume", "-duration", "1s", "-ttl", "30ms", "-workers", "5", "-keys", "2", "-pause", "0.3", "-unfenced")
}

func TestChaosCommandResumeRefusesSetsAndShapes(t *testing.T) {
	for _, args := range [][]string{{"-sets"}, {"-transfer"}, {"-shape", "rw"}, {"-shape", "semaphore"}} {
		args = append([]string{"-backend", "memory", "-resume", "-duration", "100ms"}, args...)
		if code, out := chaosCLI(t, args...); code != 2 || !strings.Contains(out, "-resume") || !strings.Contains(out, "cannot be combined") {
			t.Errorf("%q: exit %d, want 2 with the reason:\n%s", args, code, out)
		}
	}
}
