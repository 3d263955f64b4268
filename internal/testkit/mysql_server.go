package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQLServer is a throwaway local MariaDB instance: its own data directory
// in a temporary directory, listening on a free loopback port, without
// authentication (--skip-grant-tables). A test may stop, restart and kill
// it. Its methods report failures through the test that created it, so
// call them from that test's goroutine.
type MySQLServer struct {
	t    testing.TB // nil for the shared instance of MySQLURL
	bin  string     // mariadbd
	dir  string     // temporary directory: data/, the socket, mariadbd.log
	port int

	watchdog *os.File // write end of the watchdog's stdin

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// mysqlTemplate is a data directory initialised once per test binary by
// mariadb-install-db (several seconds); each server starts from a copy.
var mysqlTemplate struct {
	once     sync.Once
	dir      string
	err      error
	watchdog *os.File // never closed: the kernel closes it at exit
}

// NewMySQLServer starts a throwaway local MariaDB instance for t, always
// from the server binaries (never the shared server of MySQLURL), so that
// t may Stop, Start and Kill it. Commits are written to the operating
// system at each commit (innodb_flush_log_at_trx_commit=2), so they survive
// Kill, a crash of the server process. The instance is stopped and its
// directory removed when t ends, or by a watchdog should the test binary
// die first. Without the binaries t is skipped (or failed under
// FENCEKIT_REQUIRE_BACKENDS=1).
func NewMySQLServer(t testing.TB) *MySQLServer {
	t.Helper()
	if _, _, err := mysqlBins(); err != nil {
		t.Logf("testkit: %v", err)
		Unavailable(t, "MariaDB server binaries", "install the MariaDB server (mariadbd, mariadb-install-db); tests that restart a server need their own instance")
	}
	s, err := startLocalMySQL(t)
	if err != nil {
		t.Fatalf("testkit: local MariaDB: %v", err)
	}
	t.Cleanup(s.cleanup)
	return s
}

// DSN returns the server's DSN for go-sql-driver/mysql: user root, no
// database selected.
func (s *MySQLServer) DSN() string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", s.port)
}

// Config returns the driver configuration of a fresh database of its own
// on this server, dropped when t ends (see MySQLConfig).
func (s *MySQLServer) Config(t testing.TB) *mysql.Config {
	t.Helper()
	return mysqlDatabase(t, s.DSN())
}

// Port returns the server's TCP port; it stays the same across Stop and
// Start.
func (s *MySQLServer) Port() int { return s.port }

// Stop shuts the server down cleanly (SIGTERM) and waits until it has
// exited. Stopping a stopped server does nothing.
func (s *MySQLServer) Stop() {
	if err := s.stop(syscall.SIGTERM); err != nil {
		s.t.Fatalf("testkit: stop MariaDB: %v", err)
	}
}

// Kill ends the server with SIGKILL, as a crash would; Start runs crash
// recovery. Killing a stopped server does nothing.
func (s *MySQLServer) Kill() {
	if err := s.stop(syscall.SIGKILL); err != nil {
		s.t.Fatalf("testkit: kill MariaDB: %v", err)
	}
}

// Start starts a stopped or killed server again on the same port with the
// same data, and waits until it accepts connections.
func (s *MySQLServer) Start() {
	if err := s.start(false); err != nil {
		s.t.Fatalf("testkit: start MariaDB: %v", err)
	}
}

// Restart stops the server (cleanly, or with kill as a crash would) and
// starts it again, returning once it answers. Unlike Stop, Kill and Start
// it returns its failure instead of failing the test, so that it may run
// on a goroutine other than the test's, as a fault injector's.
func (s *MySQLServer) Restart(kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := s.stop(sig); err != nil {
		return fmt.Errorf("testkit: stop MariaDB: %w", err)
	}
	if err := s.start(false); err != nil {
		return fmt.Errorf("testkit: start MariaDB: %w", err)
	}
	return nil
}

// mysqlBins finds mariadbd and mariadb-install-db on PATH or in /usr/sbin.
func mysqlBins() (server, install string, err error) {
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin", "/opt/homebrew/bin"} {
			if fi, err := os.Stat(filepath.Join(d, name)); err == nil && !fi.IsDir() {
				return filepath.Join(d, name)
			}
		}
		return ""
	}
	server, install = find("mariadbd"), find("mariadb-install-db")
	if server == "" || install == "" {
		return "", "", errors.New("no MariaDB server binaries (mariadbd, mariadb-install-db) found")
	}
	return server, install, nil
}

// serverArgs are the options of both the bootstrap and the server: small
// buffers and logs, and no fsync per commit.
var mysqlServerArgs = []string{
	"--innodb-buffer-pool-size=16M",
	"--innodb-log-file-size=4M",
	"--innodb-data-file-path=ibdata1:4M:autoextend",
	"--innodb-flush-log-at-trx-commit=2",
	"--innodb-doublewrite=0",
	"--skip-name-resolve",
}

// template returns the initialised data directory, creating it once.
func mysqlTemplateDir(install string) (string, error) {
	mysqlTemplate.once.Do(func() {
		dir, err := os.MkdirTemp("", "fencekit-mytpl-")
		if err != nil {
			mysqlTemplate.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*startupTimeout)
		defer cancel()
		args := append([]string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data"), "--user=" + currentUser(),
			"--auth-root-authentication-method=normal", "--skip-test-db"}, mysqlServerArgs...)
		out, err := exec.CommandContext(ctx, install, args...).CombinedOutput()
		if err != nil {
			_ = os.RemoveAll(dir)
			mysqlTemplate.err = fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
			return
		}
		// The template lives as long as the test binary: a watchdog of
		// its own removes it when the binary exits.
		w, err := startWatchdogScript(mysqlWatchdogScript, dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			mysqlTemplate.err = err
			return
		}
		mysqlTemplate.dir, mysqlTemplate.watchdog = dir, w
	})
	return mysqlTemplate.dir, mysqlTemplate.err
}

// currentUser is the user mariadbd runs as: this process's, so that the
// data directory it creates stays removable.
func currentUser() string {
	if u := os.Getenv("USER"); u != "" && os.Geteuid() != 0 {
		return u
	}
	if os.Geteuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Geteuid())
}

// startLocalMySQL copies the template data directory and starts mariadbd
// on it. t may be nil for the shared instance.
func startLocalMySQL(t testing.TB) (*MySQLServer, error) {
	server, install, err := mysqlBins()
	if err != nil {
		return nil, err
	}
	tpl, err := mysqlTemplateDir(install)
	if err != nil {
		return nil, err
	}
	s := &MySQLServer{t: t, bin: server}
	base := os.TempDir()
	if len(base) > 60 {
		base = "/tmp"
	}
	if s.dir, err = os.MkdirTemp(base, "fencekit-my-"); err != nil {
		return nil, err
	}
	if out, err := exec.Command("cp", "-a", filepath.Join(tpl, "data"), s.dataDir()).CombinedOutput(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, fmt.Errorf("copy the template data directory: %w\n%s", err, out)
	}
	if err := s.startWatchdog(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.start(true); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *MySQLServer) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *MySQLServer) logFile() string { return filepath.Join(s.dir, "mariadbd.log") }

// start launches mariadbd and waits until it answers; with newPort it picks
// a free port first, and another when the server could not bind it.
func (s *MySQLServer) start(newPort bool) error {
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
		case newPort && strings.Contains(logText, "Address already in use"):
		case strings.Contains(logText, "Unable to lock") || strings.Contains(logText, "lock file"):
			time.Sleep(50 * time.Millisecond * time.Duration(attempt)) // a killed instance is still exiting
		default:
			return err
		}
	}
}

// launch runs mariadbd once and waits for readiness, its exit or the
// deadline. Called with s.mu held.
func (s *MySQLServer) launch(deadline time.Time) error {
	logf, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--no-defaults",
		"--datadir=" + s.dataDir(),
		"--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(s.dir, "sock"),
		"--pid-file=" + filepath.Join(s.dir, "mariadbd.pid"),
		"--user=" + currentUser(),
		"--skip-grant-tables",
		"--skip-log-bin",
		"--max-connections=300",
	}, mysqlServerArgs...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", "127.0.0.1:"+strconv.Itoa(s.port)
	cfg.Timeout = time.Second
	for {
		select {
		case <-exited:
			s.cmd, s.exited = nil, nil
			return fmt.Errorf("mariadbd exited during startup: %v\n%s", cmd.ProcessState, s.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := pingMySQL(ctx, cfg)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			s.cmd, s.exited = nil, nil
			return fmt.Errorf("mariadbd not ready by the deadline: %v\n%s", err, s.logTail())
		}
		select {
		case <-exited:
		case <-time.After(20 * time.Millisecond): // poll interval
		}
	}
}

func pingMySQL(ctx context.Context, cfg *mysql.Config) error {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	return db.PingContext(ctx)
}

// running reports whether mariadbd is running. Called with s.mu held.
func (s *MySQLServer) running() bool {
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

func (s *MySQLServer) stop(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return nil
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(startupTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.cmd, s.exited = nil, nil
		return fmt.Errorf("mariadbd did not stop within %v; killed it\n%s", startupTimeout, s.logTail())
	}
	s.cmd, s.exited = nil, nil
	return nil
}

func (s *MySQLServer) cleanup() {
	if err := s.stop(syscall.SIGTERM); err != nil && s.t != nil {
		s.t.Logf("testkit: %v", err)
	}
	_ = os.RemoveAll(s.dir)
	if s.watchdog != nil {
		_ = s.watchdog.Close()
		s.watchdog = nil
	}
}

func (s *MySQLServer) logTail() string {
	b, _ := os.ReadFile(s.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return strings.TrimSpace(string(b))
}

// mysqlWatchdogScript waits for its stdin to close (the test binary has
// exited), then kills a mariadbd still running in the directory $1 and
// removes the directory.
const mysqlWatchdogScript = `dir="$1"
while read -r _; do :; done
pid=$(cat "$dir/mariadbd.pid" 2>/dev/null)
if [ -n "$pid" ] && [ "$(cat /proc/$pid/comm 2>/dev/null)" = mariadbd ]; then
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$dir"
`

func (s *MySQLServer) startWatchdog() error {
	w, err := startWatchdogScript(mysqlWatchdogScript, s.dir)
	s.watchdog = w
	return err
}

// startWatchdogScript starts /bin/sh running script with dir as $1 and
// returns the write end of its stdin, which the kernel closes when the
// test binary exits, however it exits.
func startWatchdogScript(script, dir string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", script, "fencekit-my-watchdog", dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	_ = r.Close()
	go func() { _ = cmd.Wait() }() // reap it when it is done
	return w, nil
}
