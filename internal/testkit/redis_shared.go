package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// sharedRedis is the server RedisURL starts when the environment names
// none: one per test binary, so that a test that takes a client from Redis
// and a URL from RedisURL (for a CLI, a subprocess) reaches one server.
// The process dies with the test binary (Pdeathsig on Linux, else its
// watchdog), and the watchdog removes its directory.
var sharedRedis struct {
	once     sync.Once
	server   *RedisServer
	watchdog *os.File // write end of the watchdog's stdin; kept reachable so it stays open
	err      error
}

// redisWatchdogScript waits for its stdin to close (the test binary has
// exited), then kills a redis-server still running from the directory $1
// and removes the directory.
const redisWatchdogScript = `dir="$1"
while read -r _; do :; done
pid=$(cat "$dir/redis.pid" 2>/dev/null)
if [ -n "$pid" ] && [ "$(cat /proc/$pid/comm 2>/dev/null)" = redis-server ]; then
  kill -KILL "$pid" 2>/dev/null
fi
rm -rf "$dir"
`

// startSharedRedis starts the binary-wide redis-server outside any test.
func startSharedRedis() (*RedisServer, *os.File, error) {
	bin := redisServerBinary()
	if bin == "" {
		return nil, nil, fmt.Errorf("no redis-server binary")
	}
	dir, err := os.MkdirTemp("", "fencekit-redis-")
	if err != nil {
		return nil, nil, err
	}
	w, err := startWatchdogScript(redisWatchdogScript, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	s := &RedisServer{t: nopTB{}, bin: bin, dir: dir, args: []string{"--pidfile", filepath.Join(dir, "redis.pid")}}
	for attempt := 0; attempt < 5; attempt++ {
		s.port = FreePort(nopTB{}, 0)
		if err = s.launch(); err == nil {
			return s, w, nil
		}
		if !strings.Contains(s.logTail(), "Address already in use") {
			break
		}
	}
	err = fmt.Errorf("%w\n%s", err, s.logTail())
	_ = w.Close() // the watchdog removes the directory
	return nil, nil, err
}
