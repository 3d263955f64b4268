package redis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/testkit"
)

func testCtx(t *testing.T) context.Context { return testkit.Context(t) }

func newOwner(t *testing.T) string { return testkit.Owner(t) }

// roundTrips counts the network round trips a go-redis client makes: one per
// command, one per pipeline. It also records what was sent.
type roundTrips struct {
	mu   sync.Mutex
	n    int
	sent []string
}

var _ goredis.Hook = (*roundTrips)(nil)

func (r *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		r.add("pipeline[" + strings.Join(names, " ") + "]")
		return next(ctx, cmds)
	}
}

func (r *roundTrips) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.sent = append(r.sent, what)
}

// take returns the count and what was sent since the last take, and resets
// both.
func (r *roundTrips) take() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, sent := r.n, r.sent
	r.n, r.sent = 0, nil
	return n, sent
}

// counted returns a client for addr whose round trips are counted.
func counted(t *testing.T, addr string) (*goredis.Client, *roundTrips) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	rt := &roundTrips{}
	c.AddHook(rt)
	return c, rt
}

// eventually polls cond every few milliseconds until it holds, failing t
// after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
