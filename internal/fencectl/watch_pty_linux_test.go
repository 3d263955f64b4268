package fencectl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencekit/fencekit/internal/testkit/require"
	"github.com/fencekit/fencekit/lock"
)

// openPTY opens a pseudo-terminal pair: the master end the test plays the
// operator's terminal emulator on, and the terminal end fencectl gets.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	fd := int(master.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tty.Close() })
	return master, tty
}

// screen collects what fencectl writes to the terminal.
type screen struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (s *screen) read(f *os.File) {
	b := make([]byte, 4096)
	for {
		n, err := f.Read(b)
		s.mu.Lock()
		s.buf.Write(b[:n])
		s.mu.Unlock()
		if err != nil {
			return // EIO once the terminal end is closed
		}
	}
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor polls the screen until it shows want n times, or fails.
func (s *screen) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(s.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %q %d times:\n%q", want, n, s.String())
		}
		time.Sleep(10 * time.Millisecond) // a poll with a deadline
	}
}

// TestWatchInTerminal drives fencectl watch in a pseudo-terminal, as an
// operator over ssh would: it redraws the table (clear, home) until a
// single q, typed without Enter, ends it with exit 0 and the terminal's
// line mode restored; and Ctrl-C ends it the same way.
func TestWatchInTerminal(t *testing.T) {
	t.Parallel()
	w := redisWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lock.New(w.backend, &lock.Options{Metadata: "host=tty"}).Acquire(ctx, "tty/a", 30*time.Second)
	require.NoError(t, err)
	defer l.Release(context.Background())

	for _, key := range []struct {
		name string
		b    byte
	}{{"q", 'q'}, {"ctrl-c", 0x03}} {
		t.Run(key.name, func(t *testing.T) {
			master, tty := openPTY(t)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(w.args("--redis-url", w.env["FENCEKIT_REDIS_URL"], "--backend", "redis", "watch", "tty/", "--interval", "20ms"), " "))
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			require.NoError(t, cmd.Start())
			var s screen
			go s.read(master)

			// Two redraws: the table refreshes in place.
			s.waitFor(t, "host=tty", 2)
			require.Contains(t, s.String(), clearScreen)
			require.Contains(t, s.String(), "fencectl watch: redis, locks under \"tty/\"")
			// While it runs the terminal is out of line mode, so one key
			// reaches it without Enter.
			tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
			require.NoError(t, err)
			require.Equal(t, uint32(0), tio.Lflag&unix.ICANON)

			_, err = master.Write([]byte{key.b})
			require.NoError(t, err)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				var exit *exec.ExitError
				if errors.As(err, &exit) {
					t.Fatalf("exit %d:\n%s", exit.ExitCode(), s.String())
				}
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("watch did not end on %s:\n%q", key.name, s.String())
			}
			tio, err = unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
			require.NoError(t, err)
			require.True(t, tio.Lflag&unix.ICANON != 0 && tio.Lflag&unix.ECHO != 0, "line mode and echo are back")
		})
	}
}
