package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// FaketimeEnv is the environment variable naming libfaketime's library,
// when it is not in one of the usual places.
const FaketimeEnv = "FENCEKIT_FAKETIME_LIB"

// FakeClock steps the wall clock of server processes started with its Env,
// through libfaketime (LD_PRELOAD): Set writes the offset into the file the
// library reads on every clock call. The monotonic clock is left alone, as a
// real clock step leaves it.
type FakeClock struct {
	lib  string
	file string
	t    testing.TB
}

// NewFakeClock finds libfaketime (Debian: apt-get install libfaketime) and
// returns a clock at offset zero. Without it t is skipped (or failed under
// FENCEKIT_REQUIRE_BACKENDS=1).
func NewFakeClock(t testing.TB) *FakeClock {
	t.Helper()
	lib := faketimeLib()
	if lib == "" {
		Unavailable(t, "libfaketime", "install libfaketime (apt-get install -y libfaketime) or set "+FaketimeEnv+" to libfaketime.so.1")
	}
	// Not t.TempDir: a server running as another user (postgres) must be
	// able to read the file.
	dir, err := os.MkdirTemp("", "fencekit-faketime-")
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	c := &FakeClock{lib: lib, file: filepath.Join(dir, "faketime.rc"), t: t}
	c.Set("+0")
	return c
}

// Env is the environment a server process needs to run on this clock.
func (c *FakeClock) Env() []string {
	return []string{
		"LD_PRELOAD=" + c.lib,
		"FAKETIME_TIMESTAMP_FILE=" + c.file,
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}
}

// Set sets the offset from the real time in libfaketime's syntax: "-3600"
// is an hour back, "+2h" two hours ahead. It takes effect at the server's
// next clock call.
func (c *FakeClock) Set(offset string) {
	c.t.Helper()
	if err := os.WriteFile(c.file, []byte(offset+"\n"), 0o644); err != nil {
		c.t.Fatalf("testkit: faketime: %v", err)
	}
}

func faketimeLib() string {
	if p := envURL(FaketimeEnv); p != "" {
		return p
	}
	for _, pattern := range []string{
		"/usr/lib/*/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
		"/usr/local/lib/faketime/libfaketime.so.1",
	} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}
