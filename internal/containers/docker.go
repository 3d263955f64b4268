package containers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// dockerLikely reports whether a Docker engine might answer: DOCKER_HOST is
// set, or a Docker socket in a usual place accepts a connection. It is cheap,
// so that machines without Docker never pay testcontainers' own probe.
func dockerLikely() bool {
	if env("DOCKER_HOST") != "" || env("TESTCONTAINERS_DOCKER_SOCKET_OVERRIDE") != "" {
		return true
	}
	socks := []string{"/var/run/docker.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		socks = append(socks, filepath.Join(d, "docker.sock"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		socks = append(socks,
			filepath.Join(h, ".docker", "run", "docker.sock"),
			filepath.Join(h, ".docker", "desktop", "docker.sock"))
	}
	for _, s := range socks {
		if _, err := os.Stat(s); err != nil {
			continue
		}
		c, err := net.DialTimeout("unix", s, time.Second)
		if err == nil {
			_ = c.Close()
			return true
		}
	}
	return false
}

// dockerHealth is the answer of the one probe a test binary makes.
var dockerHealth struct {
	once sync.Once
	err  error
}

// dockerReady returns nil when a Docker provider answers and is healthy. It
// probes once per test binary, bounded in time: creating the provider may
// dial without a deadline of ours, so a stuck probe is left behind rather
// than hang the tests.
func dockerReady() error {
	dockerHealth.once.Do(func() { dockerHealth.err = probeDocker() })
	return dockerHealth.err
}

// probeTimeout bounds the one probe of a Docker provider.
const probeTimeout = 60 * time.Second

func probeDocker() error {
	if !dockerLikely() {
		return errors.New("no Docker socket and no DOCKER_HOST")
	}
	// Generous: against podman's Docker API, testcontainers takes about
	// 13 s on this machine to create its provider.
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	healthy := make(chan error, 1)
	go func() {
		defer func() {
			// testcontainers panics in some setups without a usable Docker.
			if r := recover(); r != nil {
				healthy <- fmt.Errorf("testcontainers panicked: %v", r)
			}
		}()
		provider, err := testcontainers.ProviderDefault.GetProvider()
		if err != nil {
			healthy <- fmt.Errorf("docker provider: %w", err)
			return
		}
		err = provider.Health(ctx)
		_ = provider.Close()
		healthy <- err
	}()
	select {
	case err := <-healthy:
		if err != nil {
			return fmt.Errorf("docker provider unhealthy: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("docker provider did not answer within %v", probeTimeout)
	}
}

// started is a container started at most once per test binary;
// testcontainers' reaper removes it when the binary exits.
type started struct {
	once sync.Once
	url  string
	err  error
}

// get returns the URL of the container run starts, starting it on the first
// call. A panic in testcontainers becomes an error.
func (s *started) get(run func(ctx context.Context) (string, error)) (string, error) {
	s.once.Do(func() {
		if err := dockerReady(); err != nil {
			s.err = err
			return
		}
		defer func() {
			if r := recover(); r != nil {
				s.url, s.err = "", fmt.Errorf("testcontainers panicked: %v", r)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s.url, s.err = run(ctx)
	})
	return s.url, s.err
}

// env returns the trimmed value of the environment variable name.
func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }

// image returns the image named by the environment variable name, else def.
func image(name, def string) string {
	if v := env(name); v != "" {
		return v
	}
	return def
}
