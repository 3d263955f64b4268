package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of a RedisSentinelGroup monitor.
const SentinelMaster = "fkmaster"

// RedisSentinelGroup is a throwaway Redis primary with one replica and three
// Sentinels (redis-server --sentinel) watching it with a quorum of two. The
// Sentinels consider the primary down after 500 ms without an answer, so a
// killed primary is replaced within a few seconds. Everything is killed when
// the test ends.
type RedisSentinelGroup struct {
	Primary   *RedisServer
	Replica   *RedisServer
	Sentinels []*RedisSentinel
}

// RedisSentinel is one redis-server running in Sentinel mode.
type RedisSentinel struct {
	port int
	dir  string
	proc *os.Process
	done chan struct{}
	once sync.Once
}

// Addr is the Sentinel's host:port.
func (s *RedisSentinel) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *RedisSentinel) kill() {
	s.once.Do(func() {
		_ = s.proc.Kill()
		select {
		case <-s.done:
		case <-time.After(redisStartTimeout):
		}
	})
}

// NewRedisSentinelGroup starts the primary, the replica (waiting until it
// replicates) and the three Sentinels (waiting until each sees the replica
// and the two other Sentinels).
func NewRedisSentinelGroup(t testing.TB) *RedisSentinelGroup {
	t.Helper()
	g := &RedisSentinelGroup{Primary: NewRedisServer(t)}
	g.Replica = NewRedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(g.Primary.Port()))
	g.Replica.WaitReplicating()
	for i := 0; i < 3; i++ {
		g.Sentinels = append(g.Sentinels, startSentinel(t, g.Primary.Port()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
	defer cancel()
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
		err := pollUntil(ctx, func() bool {
			m, err := sc.Master(ctx, SentinelMaster).Result()
			return err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2"
		})
		_ = sc.Close()
		if err != nil {
			t.Fatalf("testkit: Sentinel %s does not see the replica and the other Sentinels after %v", s.Addr(), redisStartTimeout)
		}
	}
	return g
}

// SentinelAddrs are the Sentinels' addresses, for redis.FailoverOptions.
func (g *RedisSentinelGroup) SentinelAddrs() []string {
	var addrs []string
	for _, s := range g.Sentinels {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// FailoverClient returns go-redis's Sentinel-backed client for the group,
// with go-redis's default options otherwise; closed when t ends.
func (g *RedisSentinelGroup) FailoverClient(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: g.SentinelAddrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitPromoted waits until a quorum of Sentinels names the replica as the
// primary and the replica says role:master, and returns how long that took.
func (g *RedisSentinelGroup) WaitPromoted(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
	defer cancel()
	err := pollUntil(ctx, func() bool {
		agree := 0
		for _, s := range g.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
			addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
			_ = sc.Close()
			if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(g.Replica.Port()) {
				agree++
			}
		}
		if agree < 2 {
			return false
		}
		info, err := g.Replica.Do("INFO", "replication")
		return err == nil && redisInfoField(info, "role") == "master"
	})
	if err != nil {
		t.Fatalf("testkit: no promotion of %s within %v", g.Replica.Addr(), redisStartTimeout)
	}
	return time.Since(start)
}

// startSentinel writes a Sentinel configuration and starts it.
func startSentinel(t testing.TB, primaryPort int) *RedisSentinel {
	t.Helper()
	bin := redisServerBinary()
	if bin == "" {
		Unavailable(t, "redis-server", "install redis-server (it must be on PATH)")
	}
	for attempt := 0; ; attempt++ {
		s := &RedisSentinel{port: FreePort(t, 0), dir: t.TempDir()}
		conf := filepath.Join(s.dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 500
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, s.port, s.dir, filepath.Join(s.dir, "sentinel.log"), SentinelMaster, primaryPort, SentinelMaster, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatalf("testkit: %v", err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.Dir = s.dir
		cmd.SysProcAttr = redisSysProcAttr()
		if err := redisStartProcess(cmd); err != nil {
			t.Fatalf("testkit: start redis-server --sentinel: %v", err)
		}
		s.proc, s.done = cmd.Process, make(chan struct{})
		go func() { _ = cmd.Wait(); close(s.done) }()
		t.Cleanup(s.kill)
		ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
		err := pollUntil(ctx, func() bool {
			select {
			case <-s.done:
				return true
			default:
			}
			reply, err := redisCommand(s.Addr(), time.Second, "PING")
			return err == nil && reply == "PONG"
		})
		cancel()
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
			if attempt < 3 {
				continue // most likely the port was taken meanwhile
			}
			t.Fatalf("testkit: Sentinel on %s exited at start\n%s", s.Addr(), log)
		default:
		}
		if err != nil {
			t.Fatalf("testkit: Sentinel on %s: no PONG after %v", s.Addr(), redisStartTimeout)
		}
		return s
	}
}

// pollUntil calls cond every 20 ms until it holds or ctx ends.
func pollUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
