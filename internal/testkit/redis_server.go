package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStartTimeout bounds how long a local redis-server may take to answer
// PING, and a cluster or a replica to come together.
const redisStartTimeout = 30 * time.Second

// RedisServer is a throwaway local redis-server: bound to 127.0.0.1 on a free
// port, with no persistence (--save "" --appendonly no), its working
// directory and log file in a temporary directory. It is killed when the test
// that made it ends, and also when the test binary dies (on Linux).
//
// Its methods are for the test goroutine that created it; they fail the test
// on error.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string

	mu     sync.Mutex
	proc   *os.Process
	done   chan struct{} // closed when proc has exited
	paused bool
}

// NewRedisServer starts a throwaway redis-server for t. args are extra
// command-line arguments, such as "--maxmemory", "10mb" or "--replicaof",
// "127.0.0.1", "6380". Without a redis-server binary, t is skipped (or failed
// under FENCEKIT_REQUIRE_BACKENDS=1).
func NewRedisServer(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	return newRedisServer(t, func() int { return FreePort(t, 0) }, args)
}

// newRedisServer starts a server on a port from pick, picking again when a
// port turned out to be taken.
func newRedisServer(t testing.TB, pick func() int, args []string) *RedisServer {
	t.Helper()
	bin := redisServerBinary()
	if bin == "" {
		Unavailable(t, "redis-server", "install redis-server (it must be on PATH)")
	}
	s := &RedisServer{t: t, bin: bin, dir: t.TempDir(), args: args}
	t.Cleanup(s.Kill)
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.port = pick()
		if err = s.launch(); err == nil {
			return s
		}
		if !strings.Contains(s.logTail(), "Address already in use") {
			break
		}
	}
	t.Fatalf("testkit: start redis-server: %v\n%s", err, s.logTail())
	return nil
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *RedisServer) Port() int { return s.port }

// URL is the server's redis:// URL, database 0.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// LogFile is the path of the server's log.
func (s *RedisServer) LogFile() string { return filepath.Join(s.dir, "redis.log") }

// Client returns a new go-redis client for the server, closed when t ends.
func (s *RedisServer) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do sends one command on a fresh connection and returns a simple, integer or
// bulk string reply. It is for administration in tests (CONFIG SET, INFO,
// DEBUG ...), not for data.
func (s *RedisServer) Do(args ...string) (string, error) {
	return redisCommand(s.Addr(), 10*time.Second, args...)
}

// Info returns the value of field in INFO section, or "".
func (s *RedisServer) Info(section, field string) string {
	s.t.Helper()
	info, err := s.Do("INFO", section)
	if err != nil {
		s.t.Fatalf("testkit: INFO %s on %s: %v", section, s.Addr(), err)
	}
	return redisInfoField(info, field)
}

// Running reports whether the server process is alive (paused counts as
// alive).
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *RedisServer) runningLocked() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Stop shuts the server down without saving (SHUTDOWN NOSAVE) and waits for
// the process to exit. All data is gone.
func (s *RedisServer) Stop() {
	s.t.Helper()
	if !s.Running() {
		return
	}
	s.Resume()
	_, err := s.Do("SHUTDOWN", "NOSAVE")
	if err != nil && !redisIsEOF(err) {
		s.t.Logf("testkit: SHUTDOWN NOSAVE on %s: %v; killing it", s.Addr(), err)
		s.Kill()
		return
	}
	if !s.wait(redisStartTimeout) {
		s.t.Logf("testkit: redis-server on %s did not exit after SHUTDOWN; killing it", s.Addr())
		s.Kill()
	}
}

// Start starts the server again on the same port, with the same arguments
// and empty data, and waits until it answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	if s.Running() {
		s.t.Fatalf("testkit: redis-server on %s is already running", s.Addr())
	}
	if err := s.launch(); err != nil {
		s.t.Fatalf("testkit: restart redis-server on %s: %v\n%s", s.Addr(), err, s.logTail())
	}
}

// Pause freezes the server process (SIGSTOP): connections stay open but
// nothing is answered until Resume.
func (s *RedisServer) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		s.t.Fatalf("testkit: pause: redis-server on %s is not running", s.Addr())
	}
	if err := s.proc.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("testkit: SIGSTOP redis-server: %v", err)
	}
	s.paused = true
}

// Resume lets a paused server run again (SIGCONT).
func (s *RedisServer) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused && s.runningLocked() {
		_ = s.proc.Signal(syscall.SIGCONT)
	}
	s.paused = false
}

// Kill ends the server process at once (SIGKILL) and waits for it to exit.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	running := s.runningLocked()
	if running {
		_ = s.proc.Kill() // SIGKILL also ends a stopped process
	}
	s.paused = false
	s.mu.Unlock()
	if running {
		s.wait(redisStartTimeout)
	}
}

// wait waits up to d for the process to exit.
func (s *RedisServer) wait(d time.Duration) bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// WaitReplicating waits until this server, a replica, reports
// master_link_status:up.
func (s *RedisServer) WaitReplicating() {
	s.t.Helper()
	s.waitFor("master_link_status:up", func() bool {
		return s.Info("replication", "master_link_status") == "up"
	})
}

// Promote makes this replica a primary (REPLICAOF NO ONE) and waits until it
// says role:master. A later Start runs it with its original arguments again.
func (s *RedisServer) Promote() {
	s.t.Helper()
	if _, err := s.Do("REPLICAOF", "NO", "ONE"); err != nil {
		s.t.Fatalf("testkit: REPLICAOF NO ONE on %s: %v", s.Addr(), err)
	}
	s.waitFor("role:master", func() bool { return s.Info("replication", "role") == "master" })
}

// waitFor polls cond until it holds, failing t after redisStartTimeout.
func (s *RedisServer) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(redisStartTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("testkit: redis-server on %s: no %s after %v\n%s", s.Addr(), what, redisStartTimeout, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// launch starts the process and waits until it answers PING.
func (s *RedisServer) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", s.LogFile(),
		"--daemonize", "no",
		// Serve a new replica at once instead of waiting 5 s for others.
		"--repl-diskless-sync-delay", "0",
	}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = redisSysProcAttr()
	if err := redisStartProcess(cmd); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.proc, s.done, s.paused = cmd.Process, done, false
	s.mu.Unlock()

	deadline := time.Now().Add(redisStartTimeout)
	for {
		reply, err := redisCommand(s.Addr(), time.Second, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start", s.port)
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d: no PONG after %v: %v", s.port, redisStartTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logTail returns the end of the server's log, for failure messages.
func (s *RedisServer) logTail() string {
	b, err := os.ReadFile(s.LogFile())
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// redisSpawner starts every redis-server from one goroutine locked to its OS
// thread for the life of the test binary. On Linux the child asks for SIGKILL
// when the thread that started it ends (Pdeathsig), and that thread only ends
// with the process: a test binary that panics or times out leaves no server
// behind.
var redisSpawner struct {
	once sync.Once
	reqs chan func()
}

func redisStartProcess(cmd *exec.Cmd) error {
	redisSpawner.once.Do(func() {
		redisSpawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range redisSpawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	redisSpawner.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// redisCommand sends one command to addr on a fresh connection and reads one
// reply: a simple string, an integer or a bulk string. An error reply comes
// back as an error.
func redisCommand(addr string, timeout time.Duration, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '=': // RESP3 verbatim string, "txt:" + text
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad verbatim length %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return strings.TrimPrefix(string(buf[:n]), "txt:"), nil
	}
	return "", fmt.Errorf("unsupported reply %q", line)
}

// redisIsEOF reports whether err is the connection closing, which is how a
// successful SHUTDOWN answers.
func redisIsEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// redisInfoField returns field's value from an INFO reply, or "".
func redisInfoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}
