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
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/adapters/postgres"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// workerEnv switches the test binary into a worker process (see
// workerMain); its value is the backend.
const workerEnv = "FENCEKIT_FAULTTEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// workerMain is the worker process: it acquires the lock, writes, says
// "ready <token>", and waits for a line on stdin. Its parent stops it
// (SIGSTOP) right after "ready", queues that line, lets the lease expire,
// writes as the next holder and continues it (SIGCONT). The worker then
// writes at once, as a process that was frozen does, without checking
// anything, and reports "write ok", "write stale" or "write error ...".
func workerMain() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "worker: "+format+"\n", args...)
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ttl, err := time.ParseDuration(os.Getenv("FENCEKIT_FAULTTEST_TTL"))
	if err != nil {
		return fail("ttl: %v", err)
	}
	name, key, url := os.Getenv("FENCEKIT_FAULTTEST_LOCK"), os.Getenv("FENCEKIT_FAULTTEST_KEY"), os.Getenv("FENCEKIT_FAULTTEST_URL")
	var (
		backend lock.Backend
		store   fence.Store
	)
	switch os.Getenv(workerEnv) {
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
		return fail("unknown backend %q", os.Getenv(workerEnv))
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
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			workerEnv+"="+r.child["backend"],
			"FENCEKIT_FAULTTEST_URL="+r.child["url"],
			"FENCEKIT_FAULTTEST_PREFIX="+r.child["prefix"],
			"FENCEKIT_FAULTTEST_SCHEMA="+r.child["schema"],
			"FENCEKIT_FAULTTEST_LOCK="+name,
			"FENCEKIT_FAULTTEST_KEY="+key,
			"FENCEKIT_FAULTTEST_TTL="+r.ttl.String(),
		)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
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
		lines := make(chan string, 10)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		next := func(what string) string {
			t.Helper()
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("worker exited before %s; stderr:\n%s", what, stderr.String())
				}
				return l
			case <-time.After(30 * time.Second):
				t.Fatalf("no %s from the worker in 30s", what)
			}
			return ""
		}

		ready := next("readiness")
		tokStr, ok := strings.CutPrefix(ready, "ready ")
		if !ok {
			t.Fatalf("worker said %q", ready)
		}
		workerToken, _ := strconv.ParseInt(tokStr, 10, 64)
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitStopped(t, cmd.Process.Pid)
		// Queued in the pipe: the first thing the worker reads once it runs.
		if _, err := io.WriteString(stdin, "write\n"); err != nil {
			t.Fatal(err)
		}

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

		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if got := next("the late write's outcome"); got != "write stale" {
			t.Fatalf("the continued worker's write: %q, want it refused as stale; stderr:\n%s", got, stderr.String())
		}
		expectValue(t, r, key, "b", b.Token())
	})
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
