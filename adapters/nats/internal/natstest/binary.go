package natstest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Version is the nats-server release the tests build: per-message TTLs
// (which a Backend needs) came in 2.11.
const Version = "v2.15.2"

// BinaryEnv names an environment variable with the path of a nats-server
// binary to use instead of building Version.
const BinaryEnv = "FENCEKIT_NATS_SERVER"

const serverModule = "github.com/nats-io/nats-server/v2"

var binaryOnce = sync.OnceValues(buildBinary)

// Binary returns the path of a nats-server binary: FENCEKIT_NATS_SERVER's,
// or one of Version built with `go install` from the Go module proxy into
// the user cache directory the first time. Concurrent test binaries wait for
// one build (a file lock); within one binary the outcome is kept.
func Binary() (string, error) { return binaryOnce() }

func buildBinary() (string, error) {
	if p := strings.TrimSpace(os.Getenv(BinaryEnv)); p != "" {
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory for nats-server: %w", err)
	}
	dir := filepath.Join(cache, "fencekit", "nats-server-"+Version+"-"+runtime.GOOS+"-"+runtime.GOARCH)
	bin := filepath.Join(dir, "nats-server")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another test binary while this one waited
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to build nats-server: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "install", serverModule+"@"+Version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build nats-server (go install %s@%s): %v\n%s", serverModule, Version, err, out)
	}
	// The rename is atomic: a concurrent reader sees no binary or all of it.
	if err := os.Rename(filepath.Join(tmp, "nats-server"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// BuildFirst makes sure the binary is built, and says so on stderr when
// that took a while. Call it from TestMain before m.Run.
func BuildFirst() {
	start := time.Now()
	if _, err := Binary(); err == nil && time.Since(start) > time.Second {
		fmt.Fprintf(os.Stderr, "natstest: built nats-server %s in %v\n", Version, time.Since(start).Round(time.Second))
	}
}
