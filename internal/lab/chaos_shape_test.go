package lab

import (
	"context"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

func init() {
	RegisterBackend("memory-lock-only", func(context.Context) (driver.Backend, fence.Store, func(), error) {
		return lockOnly{memory.NewBackend()}, memory.NewStore(), func() {}, nil
	})
}

func TestChaosCommandShapes(t *testing.T) {
	for _, c := range []struct{ shape, want string }{
		{"rw", "live reads above ReadFence (must be 0)           0"},
		{"semaphore", "most permits certainly live at once"},
	} {
		code, out := chaosCLI(t, "-backend", "memory", "-shape", c.shape, "-permits", "3", "-duration", "1s", "-ttl", "30ms", "-workers", "6", "-seed", "8")
		if code != 0 || !strings.Contains(out, "no violation") || !strings.Contains(out, c.want) {
			t.Fatalf("-shape %s: exit %d:\n%s", c.shape, code, out)
		}
		for _, want := range []string{"permits live beside forbidden ones (must be 0)   0",
			"stale writes accepted (must be 0)                0", "lost increments (must be 0)                      0"} {
			if !strings.Contains(out, want) {
				t.Errorf("-shape %s: output lacks %q:\n%s", c.shape, want, out)
			}
		}
	}
	unfencedLoses(t, "-shape semaphore -unfenced", nil, "-backend", "memory", "-shape", "semaphore", "-duration", "1s", "-ttl", "30ms", "-workers", "5", "-keys", "1", "-unfenced")
}

func TestChaosCommandShapeUsage(t *testing.T) {
	if code, out := chaosCLI(t, "-backend", "memory", "-shape", "triangle"); code != 2 || !strings.Contains(out, "unknown -shape") {
		t.Fatalf("unknown shape: exit %d\n%s", code, out)
	}
	if code, out := chaosCLI(t, "-backend", "memory-lock-only", "-shape", "rw", "-duration", "100ms"); code != 2 || !strings.Contains(out, "ErrUnsupported") {
		t.Fatalf("a backend without permits: exit %d\n%s", code, out)
	}
	if code, out := chaosCLI(t, "-backend", "memory", "-shape", "semaphore", "-permits", "0", "-duration", "100ms"); code != 2 {
		t.Fatalf("-permits 0: exit %d\n%s", code, out)
	}
}
