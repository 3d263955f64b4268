package testkit

import (
	"net"
	"os"
	"path/filepath"
	"time"
)

// dockerLikely reports whether a Docker engine might answer: DOCKER_HOST is
// set, or a Docker socket in a usual place accepts a connection. It is cheap,
// so that machines without Docker never pay testcontainers' own probe.
func dockerLikely() bool {
	if envURL("DOCKER_HOST") != "" || envURL("TESTCONTAINERS_DOCKER_SOCKET_OVERRIDE") != "" {
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
