package testkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ClockShift steps the wall clock of server processes started with its Env
// by an offset it reads from a file on every clock call, through a small
// LD_PRELOAD library compiled from clockShiftSource with the system's C
// compiler. It exists because libfaketime 0.9.10 (Debian 12) does not run
// redis-server 7.0 at all: the server hangs at start after libfaketime
// reports "Unexpected recursive calls to clock_gettime() without proper
// initialization" (jemalloc reads the clock while libfaketime initialises).
// The shim shifts CLOCK_REALTIME (and its coarse variant), gettimeofday and
// time; the monotonic clock is left alone, as a real clock step leaves it.
type ClockShift struct {
	lib  string
	file string
	t    testing.TB
}

// clockShiftSource makes the system calls itself (no dlsym, no malloc), so
// that it can be called while the allocator initialises.
const clockShiftSource = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
	const char *p = getenv("FENCEKIT_CLOCK_OFFSET_FILE");
	if (!p) return 0;
	int fd = open(p, O_RDONLY);
	if (fd < 0) return 0;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return 0;
	buf[n] = 0;
	return strtoll(buf, NULL, 10);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
		ts->tv_sec = ns / 1000000000LL;
		ts->tv_nsec = ns % 1000000000LL;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0 && tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

// NewClockShift compiles the shim and returns a clock at offset zero.
// Without a C compiler (cc) t is skipped, or failed under
// FENCEKIT_REQUIRE_BACKENDS=1.
func NewClockShift(t testing.TB) *ClockShift {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		Unavailable(t, "a C compiler", "install one (apt-get install -y gcc) to build the clock-shifting preload library")
	}
	dir, err := os.MkdirTemp("", "fencekit-clockshift-")
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	src := filepath.Join(dir, "clockshift.c")
	if err := os.WriteFile(src, []byte(clockShiftSource), 0o644); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	c := &ClockShift{lib: filepath.Join(dir, "clockshift.so"), file: filepath.Join(dir, "offset"), t: t}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-o", c.lib, src).CombinedOutput(); err != nil {
		t.Fatalf("testkit: compile the clock shim: %v\n%s", err, out)
	}
	c.Set(0)
	return c
}

// Env is the environment a server process needs to run on this clock.
func (c *ClockShift) Env() []string {
	return []string{"LD_PRELOAD=" + c.lib, "FENCEKIT_CLOCK_OFFSET_FILE=" + c.file}
}

// Set makes the server's wall clock read the real time plus d (negative: a
// step back). It takes effect at the server's next clock call.
func (c *ClockShift) Set(d time.Duration) {
	c.t.Helper()
	if err := os.WriteFile(c.file, []byte(strconv.FormatInt(int64(d), 10)), 0o644); err != nil {
		c.t.Fatalf("testkit: clock shift: %v", err)
	}
}
