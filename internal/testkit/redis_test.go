package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedisURLAnswers(t *testing.T) {
	c := Redis(t)
	ctx := Context(t)
	key := Namespace(t) + ":k"
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), key) })
	if got := c.Get(ctx, key).Val(); got != "v" {
		t.Fatalf("GET %s = %q, want v", key, got)
	}
}

// TestRedisOneServerPerBinaryWithoutEnv: with no FENCEKIT_REDIS_URL, a
// client from Redis and a URL from RedisURL (in the test or a subtest)
// reach the same server, as they do with the variable set; fencectl's tests
// take one of each.
func TestRedisOneServerPerBinaryWithoutEnv(t *testing.T) {
	t.Setenv(RedisURLEnv, "")
	c := Redis(t)
	ctx := Context(t)
	key := RedisPrefix(t, c) + ":k"
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	url := RedisURL(t)
	if got, err := RedisAt(t, url).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s through RedisURL's %s = %q, %v; want the value set through Redis's client", key, url, got, err)
	}
	if shared, err := SharedRedisURL(); err != nil || shared != url {
		t.Fatalf("SharedRedisURL() = %s, %v; want RedisURL's %s", shared, err, url)
	}
	t.Run("subtest", func(t *testing.T) {
		if sub := RedisURL(t); sub != url {
			t.Fatalf("a subtest's RedisURL = %s, its parent's %s", sub, url)
		}
	})
}

func TestRedisServerRestartIsEmpty(t *testing.T) {
	s := NewRedisServer(t)
	c := s.Client(t)
	ctx := Context(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if s.Running() {
		t.Fatal("server still running after Stop")
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Start()
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after restart DBSIZE = %d, %v; want 0, nil", n, err)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("after restart GET k: %v, want redis.Nil", err)
	}
}

func TestRedisServerPauseResume(t *testing.T) {
	s := NewRedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := Context(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no PING after Resume")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRedisServerKillWhilePaused(t *testing.T) {
	s := NewRedisServer(t)
	s.Pause()
	s.Kill()
	if s.Running() {
		t.Fatal("server running after Kill")
	}
	s.Start()
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Kill and Start = %q, %v", got, err)
	}
}

func TestRedisClusterComesUp(t *testing.T) {
	cl := NewRedisCluster(t, 3)
	if len(cl.Addrs()) != 3 {
		t.Fatalf("Addrs = %v", cl.Addrs())
	}
	c := cl.Client(t)
	ctx := Context(t)
	masters := map[string]bool{}
	for i := 0; i < 100; i++ {
		key := fmt.Sprintf("k%d", i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("100 keys landed on %d masters, want 3", len(masters))
	}
	for i := 0; i < 100; i++ {
		if got, err := c.Get(ctx, fmt.Sprintf("k%d", i)).Int(); err != nil || got != i {
			t.Fatalf("GET k%d = %d, %v", i, got, err)
		}
	}

	r := cl.AddReplica(t, 0)
	if got := r.Info("replication", "role"); got != "slave" {
		t.Fatalf("replica role = %q", got)
	}
	m, err := c.MasterForKey(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	if m.Options().Addr == cl.Nodes[0].Addr() {
		want = 1
	}
	if err := m.Set(ctx, "k0", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wait := 5 * time.Second
	if want == 0 {
		wait = 100 * time.Millisecond // it can only time out
	}
	if n, err := m.Wait(ctx, 1, wait).Result(); err != nil || int(n) != want {
		t.Fatalf("WAIT 1 on the master of k0 = %d, %v; want %d", n, err, want)
	}
}

func TestRedisReplicated(t *testing.T) {
	primary, replica := NewRedisReplicated(t)
	ctx := Context(t)
	p := primary.Client(t)
	if err := p.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 with the replica up = %d, %v", n, err)
	}
	if got := replica.Client(t).Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("replica GET k = %q", got)
	}

	replica.Stop()
	if err := p.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Wait(ctx, 1, 100*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 with the replica down = %d, %v", n, err)
	}

	replica.Start()
	replica.WaitReplicating()
	primary.WaitReplicas(1)
	replica.Promote()
	if got := replica.Info("replication", "role"); got != "master" {
		t.Fatalf("promoted replica role = %q", got)
	}
	if err := replica.Client(t).Set(ctx, "k", "x", 0).Err(); err != nil {
		t.Fatalf("write to the promoted replica: %v", err)
	}
}

func TestRedisPrefixCleansUp(t *testing.T) {
	c := Redis(t)
	ctx := Context(t)
	var ns string
	t.Run("writer", func(t *testing.T) {
		ns = RedisPrefix(t, c)
		for i := 0; i < 10; i++ {
			if err := c.Set(ctx, fmt.Sprintf("%s:{k%d}", ns, i), i, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	keys, err := c.Keys(ctx, ns+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("after the subtest, keys under %s: %v, %v", ns, keys, err)
	}
}
