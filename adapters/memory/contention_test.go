package memory_test

import (
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/internal/chaos"
)

// TestContentionUnderFaults runs the contention run of every backend
// (chaos.RunContention) on the memory backend: 16 workers on one lock, a
// semaphore and a read-write lock at once, with pauses past the TTL, waits
// given up and waiters killed in line. There is no network and no server
// to restart.
func TestContentionUnderFaults(t *testing.T) {
	chaos.RunContentionTest(t, func(t *testing.T) chaos.ContentionConfig {
		return chaos.ContentionConfig{Backend: memory.NewBackend(), Store: memory.NewStore(), Name: "memory"}
	})
}

// TestSoak is the soak (bench/soak): the contention run for as long as
// FENCEKIT_SOAK says, with nothing allowed to grow; it skips without it.
func TestSoak(t *testing.T) {
	chaos.RunSoakTest(t, func(t *testing.T) chaos.ContentionConfig {
		return chaos.ContentionConfig{Backend: memory.NewBackend(), Store: memory.NewStore(), Name: "memory"}
	})
}
