// Package servers starts the throwaway Redis and PostgreSQL instances the
// benchmarks run against: loopback only, on a free port, in a temporary
// directory, without persistence, and stopped (directory removed) by Stop.
// Owning the instances keeps 100k benchmark locks, MEMORY USAGE and FLUSHALL
// away from any shared server.
package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is one running throwaway instance.
type Server struct {
	Name string // "redis" or "postgres"
	Addr string // 127.0.0.1:port
	URL  string // a connection URL
	Dir  string

	cmd  *exec.Cmd
	done chan struct{}
}

// Stop ends the server (SIGTERM, then SIGKILL after a few seconds) and
// removes its directory. It is safe to call more than once and on nil.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.cmd = nil
	if s.Dir != "" {
		_ = os.RemoveAll(s.Dir)
	}
}

// PID returns the server's process id (the postmaster for PostgreSQL), or
// 0 when it is not running.
func (s *Server) PID() int {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// CPUTime returns the CPU time used so far by the process pid and all its
// children that are alive (PostgreSQL's backends), from
// /proc/PID/schedstat, which counts in nanoseconds. Linux only.
func CPUTime(pid int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p != pid {
			stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// Fields after the command name, which is in parentheses and
			// may contain spaces: state, ppid, ...
			i := strings.LastIndexByte(string(stat), ')')
			f := strings.Fields(string(stat[i+1:]))
			if len(f) < 2 || f[1] != strconv.Itoa(pid) {
				continue
			}
		}
		sched, err := os.ReadFile(filepath.Join("/proc", e.Name(), "schedstat"))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(sched))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/schedstat: %w", p, err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitTCP waits until addr accepts connections or the server exits.
func waitTCP(addr string, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("server exited during start-up")
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not accept connections within %v", addr, timeout)
}

func start(cmd *exec.Cmd) (chan struct{}, error) {
	// Die with us if we are killed before Stop runs (Linux).
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return done, nil
}

// StartRedis starts `redis-server --save "" --appendonly no` on a free
// loopback port.
func StartRedis() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "fkbench-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		logf := filepath.Join(dir, "redis.log")
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", logf,
			"--protected-mode", "yes")
		done, err := start(cmd)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		s := &Server{Name: "redis", Addr: addr, URL: "redis://" + addr, Dir: dir, cmd: cmd, done: done}
		if lastErr = waitTCP(addr, done, 15*time.Second); lastErr == nil {
			return s, nil
		}
		log, _ := os.ReadFile(logf)
		s.Dir = ""
		s.Stop()
		if !strings.Contains(string(log), "Address already in use") {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start redis-server: %w", lastErr)
}

// postgresBin finds the directory of initdb and postgres.
func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", errors.New("initdb not found (install the PostgreSQL server)")
	}
	// The highest version sorts last for single-digit-width majors of today.
	return filepath.Dir(matches[len(matches)-1]), nil
}

// waitAccepting waits until the postgres whose log is logPath says it is
// ready to accept connections, or it exits, or d passes.
func waitAccepting(logPath string, done <-chan struct{}, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		log, _ := os.ReadFile(logPath)
		if strings.Contains(string(log), "ready to accept connections") {
			return nil
		}
		select {
		case <-done:
			return errors.New("postgres exited before it accepted connections")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not log that it accepts connections within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartPostgres runs initdb into a temporary directory and starts postgres on
// a free loopback port, as user postgres when we are root. Durability is off
// (fsync, synchronous_commit, full_page_writes): the data is thrown away, and
// leaving commit flushes out makes the fenced/plain ratios stricter, not
// kinder, since a flush would add the same cost to both sides.
func StartPostgres() (*Server, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no user postgres: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("/tmp", "fkbench-pg-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=100", "-c", "shared_buffers=128MB")
		logf, err := os.Create(filepath.Join(dir, "postgres.log"))
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		done, err := start(cmd)
		logf.Close()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		s := &Server{Name: "postgres", Addr: addr, Dir: dir, cmd: cmd, done: done,
			URL: fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr)}
		if lastErr = waitTCP(addr, done, 30*time.Second); lastErr == nil {
			// TCP accepts a moment before the server takes queries (a
			// connection then fails with 57P03, "the database system is
			// starting up"): wait for that too, so that no caller has to
			// retry its first statement.
			if lastErr = waitAccepting(filepath.Join(dir, "postgres.log"), done, 30*time.Second); lastErr == nil {
				return s, nil
			}
		}
		log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		s.Dir = ""
		s.Stop()
		if !strings.Contains(string(log), "could not bind") && !strings.Contains(string(log), "already in use") {
			lastErr = fmt.Errorf("%w\n%s", lastErr, log)
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("start postgres: %w", lastErr)
}
