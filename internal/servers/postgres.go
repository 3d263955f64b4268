package servers

import (
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
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL instance with synchronous_commit on,
// so that a commit it acknowledged survives the server process's death:
// StopImmediate, then Start, runs crash recovery and keeps every
// acknowledged transaction. fsync is off: the data only has to survive the
// process, not the machine. It is safe for concurrent use.
type Postgres struct {
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	env  []string

	mu   sync.Mutex
	proc *process
}

// StartPostgres runs initdb (trust authentication, user postgres) into a
// new temporary directory and starts postgres on a free port. When this
// process runs as root the server runs as user postgres, which owns the
// directory. Close removes it. Without the binaries the error matches
// ErrNoBinary.
func StartPostgres() (*Postgres, error) { return StartPostgresEnv(nil) }

// StartPostgresEnv is StartPostgres with extra environment variables for
// the server processes ("NAME=value"), such as LD_PRELOAD for libfaketime;
// initdb runs without them.
func StartPostgresEnv(env []string) (p *Postgres, err error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	// Directly under the system's temporary directory: the server's user
	// must be able to reach it.
	dir, err := os.MkdirTemp("", "fencekit-pg-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	p = &Postgres{bin: bin, dir: dir, cred: cred, env: env}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", p.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	for attempt := 0; attempt < 5; attempt++ {
		if p.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = p.Start(); err == nil {
			return p, nil
		}
		if !strings.Contains(p.logTail(), "could not bind") {
			break
		}
	}
	return nil, err
}

// URL is the server's connection URL: user postgres, database postgres.
func (p *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *Postgres) dataDir() string { return filepath.Join(p.dir, "data") }
func (p *Postgres) logFile() string { return filepath.Join(p.dir, "postgres.log") }

// Start starts the server (again) on the same port and data directory and
// waits until it accepts connections; after StopImmediate that includes
// crash recovery. Starting a running server does nothing.
func (p *Postgres) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !p.proc.exited() {
		return nil
	}
	deadline := time.Now().Add(startTimeout)
	for attempt := 1; ; attempt++ {
		err := p.launch(deadline)
		if err == nil {
			return nil
		}
		tail := p.logTail()
		retry := strings.Contains(tail, "lock file") || strings.Contains(tail, "still in use")
		if !retry || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond * time.Duration(attempt)) // backoff: the old processes are still exiting
	}
}

func (p *Postgres) launch(deadline time.Time) error {
	logf, err := os.OpenFile(p.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	if p.cred != nil {
		_ = logf.Chown(int(p.cred.Uid), int(p.cred.Gid))
	}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"),
		"-D", p.dataDir(),
		"-p", strconv.Itoa(p.port),
		"-k", "",
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=on",
		"-c", "shared_buffers=32MB",
		"-c", "max_connections=100",
		"-c", "logging_collector=off",
	)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := start(cmd, p.cred); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	proc := watch(cmd)
	p.proc = proc
	for {
		if proc.exited() {
			return fmt.Errorf("postgres exited during startup\n%s", p.logTail())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, p.URL())
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGQUIT)
			proc.waitExit(startTimeout)
			return fmt.Errorf("postgres not ready after %v: %v\n%s", startTimeout, err, p.logTail())
		}
		proc.waitExit(20 * time.Millisecond) // poll interval
	}
}

// StopImmediate stops the server the way `pg_ctl stop -m immediate` does
// (SIGQUIT to the postmaster): every process quits at once, without a
// checkpoint, and the next Start runs crash recovery. It waits until the
// postmaster has exited. Stopping a stopped server does nothing.
func (p *Postgres) StopImmediate() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.exited() {
		return nil
	}
	_ = syscall.Kill(p.proc.cmd.Process.Pid, syscall.SIGQUIT)
	if !p.proc.waitExit(startTimeout) {
		_ = p.proc.cmd.Process.Kill()
		p.proc.waitExit(startTimeout)
		return fmt.Errorf("postgres did not exit within %v of SIGQUIT; killed it", startTimeout)
	}
	return nil
}

// Close stops the server (fast shutdown), waits for it and removes its
// directory.
func (p *Postgres) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil && !p.proc.exited() {
		_ = syscall.Kill(p.proc.cmd.Process.Pid, syscall.SIGINT)
		if !p.proc.waitExit(startTimeout) {
			_ = p.proc.cmd.Process.Kill()
			p.proc.waitExit(startTimeout)
		}
	}
	_ = os.RemoveAll(p.dir)
}

func (p *Postgres) logTail() string {
	b, _ := os.ReadFile(p.logFile())
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return strings.TrimSpace(string(b))
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root and no user %s to run the server as: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// postgresBinDir finds initdb and postgres: FENCEKIT_POSTGRES_BIN, PATH,
// then the newest of the usual installation directories (as testkit does).
func postgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := strings.TrimSpace(os.Getenv("FENCEKIT_POSTGRES_BIN")); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("%w: FENCEKIT_POSTGRES_BIN=%s holds no initdb and postgres", ErrNoBinary, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", errors.Join(ErrNoBinary, errors.New("no PostgreSQL initdb and postgres found"))
}
