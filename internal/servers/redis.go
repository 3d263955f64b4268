package servers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds a server's start and stop, and initdb; generous,
// because CI machines are shared and slow.
const startTimeout = 90 * time.Second

// Redis is a throwaway redis-server without persistence (--save ""
// --appendonly no): a Kill followed by Start brings it back empty, as a
// restart of a cache-only Redis does. It is safe for concurrent use.
type Redis struct {
	bin  string
	dir  string
	port int
	args []string
	env  []string

	mu   sync.Mutex
	proc *process
}

// StartRedis starts a redis-server on a free port with its files in a new
// temporary directory, which Close removes. args are extra command-line
// arguments. Without redis-server on PATH the error matches ErrNoBinary.
func StartRedis(args ...string) (*Redis, error) { return StartRedisEnv(nil, args...) }

// StartRedisEnv is StartRedis with extra environment variables for the
// server process ("NAME=value"), such as LD_PRELOAD for libfaketime.
func StartRedisEnv(env []string, args ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: redis-server: %v", ErrNoBinary, err)
	}
	dir, err := os.MkdirTemp("", "fencekit-redis-")
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir, args: args, env: env}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	for attempt := 0; attempt < 5; attempt++ {
		if r.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = r.Start(); err == nil {
			return r, nil
		}
		if !strings.Contains(r.logTail(), "Address already in use") {
			break
		}
	}
	return nil, err
}

// Addr is the server's host:port; it stays the same across Kill and Start.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// URL is the server's redis:// URL, database 0.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

func (r *Redis) logFile() string { return filepath.Join(r.dir, "redis.log") }

// Start starts the server (again) and waits until it answers PING. Starting
// a running server does nothing.
func (r *Redis) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil && !r.proc.exited() {
		return nil
	}
	args := append([]string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", r.dir,
		"--logfile", r.logFile(),
		"--daemonize", "no",
	}, r.args...)
	cmd := exec.Command(r.bin, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	if err := start(cmd, nil); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.proc = watch(cmd)
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(r.Addr())
		if err == nil {
			return nil
		}
		if r.proc.exited() {
			return fmt.Errorf("redis-server on %s exited at start\n%s", r.Addr(), r.logTail())
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			r.proc.waitExit(startTimeout)
			return fmt.Errorf("redis-server on %s: no PONG after %v: %v", r.Addr(), startTimeout, err)
		}
		r.proc.waitExit(5 * time.Millisecond) // poll interval
	}
}

// Kill ends the server at once (SIGKILL) and waits until it has exited. All
// its data is gone. Killing a stopped server does nothing.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.exited() {
		return nil
	}
	_ = r.proc.cmd.Process.Kill()
	if !r.proc.waitExit(startTimeout) {
		return fmt.Errorf("redis-server on %s did not exit after SIGKILL", r.Addr())
	}
	return nil
}

// Close kills the server and removes its directory.
func (r *Redis) Close() {
	_ = r.Kill()
	_ = os.RemoveAll(r.dir)
}

func (r *Redis) logTail() string {
	b, _ := os.ReadFile(r.logFile())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// ping sends PING on a fresh connection and expects PONG.
func ping(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	return nil
}

// credential is the user to run a server as: postgres when this process
// runs as root (initdb and postgres refuse root), else nil.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	return lookupCredential("postgres")
}
