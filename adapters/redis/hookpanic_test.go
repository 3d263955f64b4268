package redis_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// errHookPanic is what panickingHook panics with.
var errHookPanic = errors.New("instrumentation hook panicked")

// panickingHook is a go-redis hook of a user's instrumentation that panics
// on every command and pipeline once armed.
type panickingHook struct{ armed atomic.Bool }

func (h *panickingHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *panickingHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.armed.Load() {
			panic(errHookPanic)
		}
		return next(ctx, cmd)
	}
}

func (h *panickingHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if h.armed.Load() {
			panic(errHookPanic)
		}
		return next(ctx, cmds)
	}
}

// recoverFrom runs f and returns what it panicked with (nil: no panic).
func recoverFrom(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// wantHookPanic checks that v is the hook's panic, carried back to this
// goroutine with the stack of the goroutine where it happened.
func wantHookPanic(t *testing.T, v any) {
	t.Helper()
	pe, ok := v.(*lock.PanicError)
	if !ok {
		t.Fatalf("recovered %T %v, want a *lock.PanicError", v, v)
	}
	if !errors.Is(pe, errHookPanic) || pe.Value != errHookPanic {
		t.Fatalf("recovered %v, want the hook's value %v", pe.Value, errHookPanic)
	}
	if !strings.Contains(string(pe.Stack), "hookpanic_test.go") {
		t.Fatalf("the carried stack does not show the hook:\n%s", pe.Stack)
	}
}

// TestHookPanicReachesCaller: with a context that has a deadline the adapter
// runs each go-redis call on a goroutine of its own; a panic in a go-redis
// hook there reaches the caller's recover instead of ending the program,
// for every such call: the scripts (Acquire), a read (Store.Get), a scan
// (List), the replication wait (WaitReplicas), a typed-nil client, and
// lock's own bounded renewal and release on top of them.
func TestHookPanicReachesCaller(t *testing.T) {
	url := testkit.RedisURL(t)
	newClient := func(t *testing.T) (*goredis.Client, *panickingHook) {
		opts, err := goredis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		h := &panickingHook{}
		c.AddHook(h)
		h.armed.Store(true)
		return c, h
	}
	deadline := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("script", func(t *testing.T) {
		c, _ := newClient(t)
		b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, testkit.Redis(t))})
		wantHookPanic(t, recoverFrom(func() { _, _ = acquire(deadline(t), b, "a", newOwner(t), time.Minute) }))
	})
	t.Run("store read", func(t *testing.T) {
		c, _ := newClient(t)
		s := fenceredis.NewStore(c, &fenceredis.StoreOptions{Prefix: testkit.RedisPrefix(t, testkit.Redis(t))})
		wantHookPanic(t, recoverFrom(func() { _, _ = s.Get(deadline(t), "k") }))
	})
	t.Run("list", func(t *testing.T) {
		c, _ := newClient(t)
		b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, testkit.Redis(t))})
		wantHookPanic(t, recoverFrom(func() { _, _ = b.List(deadline(t), "") }))
	})
	t.Run("replication wait", func(t *testing.T) {
		c, _ := newClient(t)
		b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, testkit.Redis(t)), WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
		wantHookPanic(t, recoverFrom(func() { _, _ = acquire(deadline(t), b, "a", newOwner(t), time.Minute) }))
	})
	t.Run("typed-nil client", func(t *testing.T) {
		var c *goredis.Client // not nil as a Client interface: the adapter cannot refuse it before calling it
		b := fenceredis.NewBackend(c, nil)
		v := recoverFrom(func() { _, _ = acquire(deadline(t), b, "a", newOwner(t), time.Minute) })
		pe, ok := v.(*lock.PanicError)
		var re runtime.Error
		if !ok || !errors.As(pe, &re) {
			t.Fatalf("recovered %T %v, want a *lock.PanicError carrying the nil dereference", v, v)
		}
	})
	t.Run("lease extend and release", func(t *testing.T) {
		c, h := newClient(t)
		h.armed.Store(false)
		b := fenceredis.NewBackend(c, &fenceredis.BackendOptions{Prefix: testkit.RedisPrefix(t, testkit.Redis(t))})
		lease, err := lock.New(b, nil).Acquire(deadline(t), "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		h.armed.Store(true)
		wantHookPanic(t, recoverFrom(func() { _ = lease.Extend(deadline(t), time.Minute) }))
		wantHookPanic(t, recoverFrom(func() { _ = lease.Release(deadline(t)) }))
	})
}
