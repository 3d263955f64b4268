package fencectl

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit"
)

// mainArgsEnv, when set in the environment of this test binary, makes it
// run fencectl's main with these (space-separated) arguments instead of the
// tests: the tests see what an operator's terminal shows, go-redis's
// global logger included.
const mainArgsEnv = "FENCECTL_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		os.Args = append([]string{"fencectl"}, strings.Fields(args)...)
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}

// fencectlMain runs fencectl's main in a child process with args and
// returns its exit code and stderr, with no server URL in its environment.
// FENCEKIT_REDIS_LOG=1 keeps go-redis's logger as testkit found it, so only
// main itself can silence it.
func fencectlMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		// fencectl reads the server URLs from the environment too: the
		// child gets only what args say.
		if !strings.HasPrefix(kv, "FENCEKIT_REDIS_URL=") && !strings.HasPrefix(kv, "FENCEKIT_POSTGRES_URL=") && !strings.HasPrefix(kv, "FENCEKIT_MYSQL_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, mainArgsEnv+"="+strings.Join(args, " "), testkit.RedisLogEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run fencectl: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestUnreachableOneLine: a server that refuses connections gives exit 1 and
// one clear line on stderr, not go-redis's dial-failure log lines first.
func TestUnreachableOneLine(t *testing.T) {
	t.Parallel()
	code, stderr := fencectlMain(t, "--redis-url", "redis://127.0.0.1:1/0", "--timeout", "5s", "inspect", "x")
	if code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
	if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 ||
		!strings.HasPrefix(lines[0], "fencectl: cannot reach Redis at 127.0.0.1:1: ") || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("stderr:\n%s\nwant one line: fencectl: cannot reach Redis at 127.0.0.1:1: ... connection refused", stderr)
	}

	// pgx lists every address it tried, one line each: still one line.
	code, _, errOut := ctl(t, nil, "--postgres-url", "postgres://postgres@localhost:1/test", "--timeout", "5s", "inspect", "x")
	if code != exitFailed || strings.Count(errOut, "\n") != 1 ||
		!strings.HasPrefix(errOut, "fencectl: cannot reach PostgreSQL at localhost:1: ") || !strings.Contains(errOut, "connection refused") {
		t.Errorf("exit %d, stderr %q; want 1 and one line: fencectl: cannot reach PostgreSQL at localhost:1: ... connection refused", code, errOut)
	}
}

// TestTimeoutNotPositiveIsUsage: --timeout 0 or below is a usage error
// (exit 2) that names the flag, before any server is contacted.
func TestTimeoutNotPositiveIsUsage(t *testing.T) {
	t.Parallel()
	env := map[string]string{"FENCEKIT_REDIS_URL": "redis://127.0.0.1:1/0"}
	for _, timeout := range []string{"0", "0s", "-1s"} {
		code, out, errOut := ctl(t, env, "--timeout", timeout, "inspect", "x")
		if code != exitUsage || out != "" || !strings.Contains(errOut, "--timeout must be above zero") {
			t.Errorf("--timeout %s: exit %d, %q; want exit 2 and --timeout must be above zero", timeout, code, errOut)
		}
	}
}
