//go:build unix

package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/adapters/postgres"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// workerEnv switches the test binary into a worker process; its value names
// the worker's role in workers.
const workerEnv = "FENCEKIT_FAULTTEST_WORKER"

// workers are the roles a worker process can play; each returns the
// process's exit code.
var workers = map[string]func() int{
	"fenced-put": fencedPutWorker,
	"invoices":   invoiceWorker,
}

func TestMain(m *testing.M) {
	if role := os.Getenv(workerEnv); role != "" {
		work, ok := workers[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "worker: unknown role %q\n", role)
			os.Exit(3)
		}
		os.Exit(work())
	}
	os.Exit(m.Run())
}

// workerFail reports a worker's failure on stderr and returns its exit code.
func workerFail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "worker: "+format+"\n", args...)
	return 3
}

// fencedPutWorker is the worker process: it acquires the lock, writes, says
// "ready <token>", and waits for a line on stdin. Its parent stops it
// (SIGSTOP) right after "ready", queues that line, lets the lease expire,
// writes as the next holder and continues it (SIGCONT). The worker then
// writes at once, as a process that was frozen does, without checking
// anything, and reports "write ok", "write stale" or "write error ...".
func fencedPutWorker() int {
	fail := workerFail
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ttl, err := time.ParseDuration(os.Getenv("FENCEKIT_FAULTTEST_TTL"))
	if err != nil {
		return fail("ttl: %v", err)
	}
	name, key, url := os.Getenv("FENCEKIT_FAULTTEST_LOCK"), os.Getenv("FENCEKIT_FAULTTEST_KEY"), os.Getenv("FENCEKIT_FAULTTEST_URL")
	var (
		backend driver.Backend
		store   fence.Store
	)
	switch os.Getenv("FENCEKIT_FAULTTEST_BACKEND") {
	case "redis":
		opts, err := goredis.ParseURL(url)
		if err != nil {
			return fail("%v", err)
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		prefix := os.Getenv("FENCEKIT_FAULTTEST_PREFIX")
		backend = fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: prefix})
		store = fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: prefix})
	case "postgres":
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return fail("%v", err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv("FENCEKIT_FAULTTEST_SCHEMA")
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fail("%v", err)
		}
		defer pool.Close()
		backend, store = postgres.NewBackend(pool, nil), postgres.NewStore(pool, nil)
	default:
		return fail("unknown backend %q", os.Getenv("FENCEKIT_FAULTTEST_BACKEND"))
	}
	lease, err := lock.New(backend, nil).TryAcquire(ctx, name, ttl)
	if err != nil {
		return fail("acquire: %v", err)
	}
	w := lease.Fenced(store)
	if err := w.Put(ctx, key, []byte("worker-before-stop")); err != nil {
		return fail("put: %v", err)
	}
	fmt.Printf("ready %d\n", lease.Token())
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || line != "write\n" {
		return fail("stdin: %q, %v", line, err)
	}
	// Continued after the stop: write straight away.
	err = w.Put(ctx, key, []byte("worker-after-stop"))
	switch {
	case err == nil:
		fmt.Println("write ok")
	case errors.Is(err, fence.ErrStale):
		fmt.Println("write stale")
	default:
		fmt.Printf("write error %v\n", err)
	}
	return 0
}

// A worker process stopped with SIGSTOP past its TTL, while the next holder
// takes the lock and writes, then continued with SIGCONT: its write, made
// the moment it runs again, is refused.
func TestPausedHolderProcess(t *testing.T) {
	// Not on memory: stopping the holder's process would stop the backend
	// too (TestPausedHolderGoroutine covers it).
	eachServerBackend(t, func(t *testing.T, r *rig) {
		ctx := testCtx(t)
		name, key := unique(t, "lock"), unique(t, "key")
		w := startWorker(t, "fenced-put", map[string]string{
			"FENCEKIT_FAULTTEST_BACKEND": r.child["backend"],
			"FENCEKIT_FAULTTEST_URL":     r.child["url"],
			"FENCEKIT_FAULTTEST_PREFIX":  r.child["prefix"],
			"FENCEKIT_FAULTTEST_SCHEMA":  r.child["schema"],
			"FENCEKIT_FAULTTEST_LOCK":    name,
			"FENCEKIT_FAULTTEST_KEY":     key,
			"FENCEKIT_FAULTTEST_TTL":     r.ttl.String(),
		})
		workerToken := w.expectToken("ready ")
		w.stop()
		// Queued in the pipe: the first thing the worker reads once it runs.
		w.say("write")

		waitFree(t, r, name)
		b, err := lock.New(r.direct, nil).TryAcquire(ctx, name, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release(context.Background())
		if int64(b.Token()) <= workerToken {
			t.Fatalf("token %d after the worker's %d", b.Token(), workerToken)
		}
		mustPut(t, b.Fenced(r.directStore), key, "b")

		w.cont()
		if got := w.next("the late write's outcome"); got != "write stale" {
			t.Fatalf("the continued worker's write: %q, want it refused as stale; stderr:\n%s", got, w.stderr.String())
		}
		expectValue(t, r, key, "b", b.Token())
	})
}

// workerProcess is this test binary re-executed as a worker (see
// TestMain), talking line by line: it prints on stdout and reads stdin.
type workerProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
}

// startWorker starts a worker process in role with env added to this
// process's environment. It is continued and killed when t ends.
func startWorker(t *testing.T, role string, env map[string]string) *workerProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+role)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	w := &workerProcess{t: t, cmd: cmd, lines: make(chan string, 100), stderr: &syncBuffer{}}
	cmd.Stderr = w.stderr
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	return w
}

// next returns the worker's next line, failing t when it exits first or
// says nothing for 30 s.
func (w *workerProcess) next(what string) string {
	w.t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok {
			// Wait copies the rest of its stderr before it returns: read
			// before that, the worker's reason for failing may be missing.
			err := w.cmd.Wait()
			w.t.Fatalf("worker exited before %s (%v); stderr:\n%s", what, err, w.stderr.String())
		}
		return l
	case <-time.After(30 * time.Second):
		w.t.Fatalf("no %s from the worker in 30s; stderr:\n%s", what, w.stderr.String())
	}
	return ""
}

// expectToken reads a line "<prefix><token>" and returns the token.
func (w *workerProcess) expectToken(prefix string) int64 {
	w.t.Helper()
	line := w.next(strings.TrimSpace(prefix))
	s, ok := strings.CutPrefix(line, prefix)
	tok, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil {
		w.t.Fatalf("worker said %q, want %q and a token; stderr:\n%s", line, prefix, w.stderr.String())
	}
	return tok
}

// say writes line to the worker's stdin. A stopped worker reads it first
// thing once continued.
func (w *workerProcess) say(line string) {
	w.t.Helper()
	if _, err := io.WriteString(w.stdin, line+"\n"); err != nil {
		w.t.Fatal(err)
	}
}

// stop freezes the worker with SIGSTOP, keep-alive and all, as a long GC
// pause or a suspended VM would, and waits until it is stopped.
func (w *workerProcess) stop() {
	w.t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		w.t.Fatal(err)
	}
	waitStopped(w.t, w.cmd.Process.Pid)
}

// cont continues a stopped worker with SIGCONT.
func (w *workerProcess) cont() {
	w.t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		w.t.Fatal(err)
	}
}

// wait waits for the worker to exit and fails t unless it exited 0.
func (w *workerProcess) wait() {
	w.t.Helper()
	for range w.lines { // drain, so that the worker never blocks on stdout
	}
	if err := w.cmd.Wait(); err != nil {
		w.t.Fatalf("worker: %v; stderr:\n%s", err, w.stderr.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec and
// the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitStopped waits until the process is in the stopped state, where /proc
// tells (Linux); elsewhere SIGSTOP is taken as immediate.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/stat", pid)
	if _, err := os.Stat(path); err != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		// pid (comm) state ...: the state follows the last ')'.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %d not stopped after 10s: %s", pid, b)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
