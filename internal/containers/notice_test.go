//go:build unix

package containers

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// noEngineEnv is an environment in which no Docker engine can answer.
func noEngineEnv(t *testing.T) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DOCKER_HOST=") || strings.HasPrefix(kv, "TESTCONTAINERS_") ||
			strings.HasPrefix(kv, RequireEnv+"=") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			continue
		}
		env = append(env, kv)
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		t.Skip("this machine has /var/run/docker.sock: cannot take the engine away")
	}
	return append(env, "HOME="+t.TempDir())
}

const noticeStart = "internal/containers: no Docker engine ("

// TestNoEngineNotice: without a Docker engine the test binary says why its
// tests skip and how to run them, on stdout, and on the terminal when it
// runs in one without -v (where go test would show only "ok").
func TestNoEngineNotice(t *testing.T) {
	if os.Getenv("CONTAINERS_NOTICE_CHILD") == "1" {
		return // the child's TestMain has printed the notice already
	}
	env := append(noEngineEnv(t), "CONTAINERS_NOTICE_CHILD=1")
	run := []string{os.Args[0], "-test.run=^TestNoEngineNotice$"}

	cmd := exec.Command(run[0], run[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no controlling terminal: the notice goes to stdout only
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), noticeStart) || !strings.Contains(string(out), "DOCKER_HOST") ||
		!strings.Contains(string(out), RequireEnv+"=1") {
		t.Fatalf("child: %v; stdout lacks the notice:\n%s", err, out)
	}

	// In a terminal (a pseudo-terminal from script(1)), with the child's
	// stdout thrown away as go test does for a passing package.
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the child a terminal")
	}
	cmd = exec.Command(script, "-qec", strings.Join(run, " ")+" >/dev/null 2>&1", "/dev/null")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), noticeStart) {
		t.Fatalf("child in a terminal: %v; the terminal did not get the notice:\n%s", err, out)
	}
}
