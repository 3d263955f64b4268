package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresServer is a throwaway local PostgreSQL instance: its own data
// directory in a temporary directory, listening on a free loopback port. A
// test may stop, restart and kill it. Its methods report failures through
// the test that created it, so call them from that test's goroutine.
type PostgresServer struct {
	t testing.TB // nil for the shared instance of PostgresURL

	bin  string // directory of initdb and postgres
	dir  string // temporary directory: data/, the socket, postgres.log
	port int
	cred *syscall.Credential // run as this user (postgres when we are root)

	watchdog *os.File // write end of the watchdog's stdin; see startWatchdog

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// startupTimeout bounds initdb, a start and a stop.
const startupTimeout = 60 * time.Second

// NewPostgresServer starts a throwaway local PostgreSQL instance for t,
// always from the server binaries (never the shared server of PostgresURL),
// so that t may Stop, Start and Kill it. It runs initdb with trust
// authentication into a temporary directory and starts postgres on a free
// 127.0.0.1 port with fsync, synchronous_commit and full_page_writes off;
// it runs them as user postgres when the test runs as root. The instance is
// stopped and its directory removed when t ends, or, should the test binary
// die first, by a small watchdog process. Without the binaries t is skipped
// (or failed under FENCEKIT_REQUIRE_BACKENDS=1).
//
// Starting one costs about a second (initdb); tests that do not stop or kill
// the server should share one, or use Postgres.
func NewPostgresServer(t testing.TB) *PostgresServer {
	t.Helper()
	if _, err := postgresBinDir(); err != nil {
		t.Logf("testkit: %v", err)
		Unavailable(t, "PostgreSQL server binaries", "install the PostgreSQL server (initdb, postgres) or set "+PostgresBinEnv+" to their directory; tests that restart a server need their own instance")
	}
	s, err := startLocalPostgres(t)
	if err != nil {
		t.Fatalf("testkit: local PostgreSQL: %v", err)
	}
	t.Cleanup(s.cleanup)
	return s
}

// URL returns the server's connection URL: user postgres, database
// postgres, no TLS.
func (s *PostgresServer) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port returns the server's TCP port. It stays the same across Stop and Start.
func (s *PostgresServer) Port() int { return s.port }

// Pool returns a pool on the server whose connections use a fresh schema of
// their own, as Postgres does; it is closed and the schema dropped when t
// ends. The pool pings every connection before handing it out, so that it
// replaces connections a Stop, Kill or Start broke by itself.
func (s *PostgresServer) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return schemaPool(t, s.URL(), true)
}

// Stop shuts the server down in "fast" mode (open transactions are rolled
// back, committed data is flushed) and waits until it has exited. Stopping
// a stopped server does nothing.
func (s *PostgresServer) Stop() {
	if err := s.stop(syscall.SIGINT); err != nil {
		s.t.Fatalf("testkit: stop PostgreSQL: %v", err)
	}
}

// Kill ends the server and all its processes with SIGKILL, as a crash would: no checkpoint, no flush of WAL still in memory (with
// synchronous_commit=off the last commits can be lost). Start runs crash
// recovery. Killing a stopped server does nothing.
func (s *PostgresServer) Kill() {
	if err := s.stop(syscall.SIGKILL); err != nil {
		s.t.Fatalf("testkit: kill PostgreSQL: %v", err)
	}
}

// Start starts a stopped or killed server again on the same port with the
// same data directory, and waits until it accepts connections. Starting a
// running server does nothing.
func (s *PostgresServer) Start() {
	if err := s.start(false); err != nil {
		s.t.Fatalf("testkit: start PostgreSQL: %v", err)
	}
}

// Restart stops the server (fast shutdown, or SIGKILL with kill, which
// with synchronous_commit=off can lose the last commits) and starts it
// again, returning once it accepts connections. Unlike Stop and Start it
// returns its failure instead of failing the test, so that it may run on a
// goroutine other than the test's, as a fault injector's.
func (s *PostgresServer) Restart(kill bool) error {
	sig := syscall.SIGINT
	if kill {
		sig = syscall.SIGKILL
	}
	if err := s.stop(sig); err != nil {
		return fmt.Errorf("testkit: stop PostgreSQL: %w", err)
	}
	if err := s.start(false); err != nil {
		return fmt.Errorf("testkit: start PostgreSQL: %w", err)
	}
	return nil
}

// startLocalPostgres creates, initialises and starts an instance. t is kept
// for the methods' failures; it may be nil for the shared instance.
func startLocalPostgres(t testing.TB) (*PostgresServer, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	s := &PostgresServer{t: t, bin: bin}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no user postgres to run the server as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}

	// A short directory name: the Unix socket path must fit 107 bytes.
	base := os.TempDir()
	if len(base) > 60 {
		base = "/tmp"
	}
	s.dir, err = os.MkdirTemp(base, "fencekit-pg-")
	if err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			_ = os.RemoveAll(s.dir)
			return nil, err
		}
	}
	if err := s.startWatchdog(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", s.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	initdb.Dir = s.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := s.start(true); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *PostgresServer) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *PostgresServer) logFile() string { return filepath.Join(s.dir, "postgres.log") }

// start launches postgres and waits until it accepts connections. With
// newPort it picks a free port first, and picks another when postgres could
// not bind it (another process took it meanwhile).
func (s *PostgresServer) start(newPort bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		return nil
	}
	deadline := time.Now().Add(startupTimeout)
	for attempt := 1; ; attempt++ {
		if newPort {
			s.port = FreePort(nopTB{}, 0)
		}
		err := s.launch(deadline)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || attempt >= 20 {
			return err
		}
		logText := s.logTail()
		switch {
		case newPort && strings.Contains(logText, "could not bind"):
			// port taken between FreePort and bind: try another
		case strings.Contains(logText, "still in use") || strings.Contains(logText, "already in use") || strings.Contains(logText, "lock file"):
			// processes of a killed instance are still exiting
			time.Sleep(50 * time.Millisecond * time.Duration(attempt))
		default:
			return err
		}
	}
}

// launch runs postgres once and waits for readiness, the process's exit or
// the deadline. Called with s.mu held.
func (s *PostgresServer) launch(deadline time.Time) error {
	logf, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	if s.cred != nil {
		_ = logf.Chown(int(s.cred.Uid), int(s.cred.Gid))
	}
	sockDir := s.dir
	if len(sockDir) > 80 {
		sockDir = "" // no Unix socket; tests connect over TCP
	}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"),
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB",
		"-c", "max_connections=200",
		"-c", "logging_collector=off",
	)
	cmd.Dir = s.dir
	// Never the test binary's stdout or stderr: go test waits for every
	// holder of those pipes to close them.
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a terminal's Ctrl-C goes to the test binary only
	// (the watchdog then cleans up). Backends call setsid, so Kill finds
	// them by parent (killTree).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	url := s.URL()
	for {
		select {
		case <-exited:
			s.cmd, s.exited = nil, nil
			return fmt.Errorf("postgres exited during startup: %v\n%s", cmd.ProcessState, s.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			killTree(cmd.Process.Pid)
			<-exited
			s.cmd, s.exited = nil, nil
			return fmt.Errorf("postgres not ready by the deadline: %v\n%s", err, s.logTail())
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Millisecond): // poll interval
		}
	}
}

// running reports whether postgres is running. Called with s.mu held.
func (s *PostgresServer) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		s.cmd, s.exited = nil, nil
		return false
	default:
		return true
	}
}

// stop signals postgres (SIGINT: fast shutdown; SIGKILL: the postmaster and
// every child) and waits for the postmaster to exit.
func (s *PostgresServer) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return nil
	}
	pid := s.cmd.Process.Pid
	if sig == syscall.SIGKILL {
		killTree(pid)
	} else {
		_ = syscall.Kill(pid, sig)
	}
	select {
	case <-s.exited:
	case <-time.After(startupTimeout):
		killTree(pid)
		<-s.exited
		s.cmd, s.exited = nil, nil
		return fmt.Errorf("postgres did not stop within %v; killed it\n%s", startupTimeout, s.logTail())
	}
	s.cmd, s.exited = nil, nil
	return nil
}

// cleanup stops the server, removes its directory and lets the watchdog go.
func (s *PostgresServer) cleanup() {
	if err := s.stop(syscall.SIGINT); err != nil && s.t != nil {
		s.t.Logf("testkit: %v", err)
	}
	_ = os.RemoveAll(s.dir)
	if s.watchdog != nil {
		_ = s.watchdog.Close()
		s.watchdog = nil
	}
}

// killTree kills the postmaster pid and its children with SIGKILL, and
// waits until the children are dead, so that a new postmaster does not find
// the shared memory still attached. Children are not in the postmaster's
// process group (each backend calls setsid), so they are found by their
// parent pid. The postmaster is stopped first so that it forks no new child
// meanwhile. The caller reaps the postmaster.
func killTree(pid int) {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	var children []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid := procStat(child); state != "" && ppid == pid {
			_ = syscall.Kill(child, syscall.SIGKILL)
			children = append(children, child)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	// Orphans may stay zombies if nobody reaps them; a zombie holds no
	// shared memory, so dead or zombie is enough.
	deadline := time.Now().Add(10 * time.Second)
	for _, child := range children {
		for time.Now().Before(deadline) {
			if state, _ := procStat(child); state == "" || state == "Z" || state == "X" {
				break
			}
			time.Sleep(time.Millisecond) // poll interval
		}
	}
}

// procStat returns the state and parent pid of pid from /proc, or "" when
// the process is gone.
func procStat(pid int) (state string, ppid int) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return "", 0
	}
	ppid, _ = strconv.Atoi(fields[1])
	return fields[0], ppid
}

// logTail returns the end of the server's log, for error messages.
func (s *PostgresServer) logTail() string {
	b, _ := os.ReadFile(s.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// watchdogScript waits for its stdin to close, which happens when the test
// binary exits, however it exits (a failed test, a timeout panic, SIGKILL).
// It then ends a postgres still running in the directory $1 and removes the
// directory. In the normal case cleanup has already done both.
const watchdogScript = `dir="$1"
while read -r _; do :; done
pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ] && [ "$(cat /proc/$pid/comm 2>/dev/null)" = postgres ]; then
  kill -QUIT "$pid" 2>/dev/null
  i=0
  while [ $i -lt 100 ] && [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; do
    sleep 0.1; i=$((i+1))
  done
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$dir"
`

// startWatchdog starts a shell that removes the instance when the test
// binary is gone (see watchdogScript). The test binary holds the write end
// of the shell's stdin; the kernel closes it when the binary exits.
func (s *PostgresServer) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "fencekit-pg-watchdog", s.dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return fmt.Errorf("start watchdog: %w", err)
	}
	_ = r.Close()
	go func() { _ = cmd.Wait() }() // reap it when it is done
	s.watchdog = w
	return nil
}

// postgresBinDir finds the directory holding initdb and postgres:
// FENCEKIT_POSTGRES_BIN, then PATH, then the newest of the usual
// installation directories.
func postgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := envURL(PostgresBinEnv); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s=%s holds no initdb and postgres", PostgresBinEnv, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	var dirs []string
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",
		"/usr/pgsql-*/bin",
		"/usr/local/pgsql/bin",
		"/opt/homebrew/opt/postgresql*/bin",
		"/usr/local/opt/postgresql*/bin",
	} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	// Newest major version first: compare the version numbers in the paths.
	sort.SliceStable(dirs, func(i, j int) bool { return pathVersion(dirs[i]) > pathVersion(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) found")
}

// pathVersion returns the first number in path, or 0.
func pathVersion(path string) int {
	start := strings.IndexAny(path, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(path) && path[end] >= '0' && path[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(path[start:end])
	return n
}

// nopTB lets FreePort run outside a test: its Fatalf panics, which only a
// broken network stack would cause.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                           {}
func (nopTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
