package suite

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	goredis "github.com/redis/go-redis/v9"
)

// Redis memory per held lock and per idle lock (released, what stays
// behind), for each library: MEMORY USAGE of a lock's keys (SAMPLES 0, so
// exact) averaged over a sample of locks, and the INFO used_memory delta over
// all of them, which also counts the keyspace and expiry dictionaries.
// It needs a server of its own: it flushes between libraries.

// memHolder takes and releases locks for the memory measurement.
type memHolder struct {
	lib string
	// hold takes name; release gives it up again.
	hold func(ctx context.Context, e *Env, name string) (release func(context.Context) error, err error)
	// keys are the Redis keys of name's lock.
	keys func(e *Env, name string) []string
	// idleKeys are the keys left after release (nil: none).
	idleKeys func(e *Env, name string) []string
}

var memHolders []memHolder

func init() {
	memHolders = append(memHolders,
		memHolder{lib: "bsm/redislock",
			hold: func(ctx context.Context, e *Env, name string) (func(context.Context) error, error) {
				l, err := redislock.New(e.Redis).Obtain(ctx, name, 10*time.Minute, nil)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			},
			keys: func(_ *Env, name string) []string { return []string{name} },
		},
		memHolder{lib: "go-redsync",
			hold: func(ctx context.Context, e *Env, name string) (func(context.Context) error, error) {
				m := e.redsync().NewMutex(name, redsync.WithExpiry(10*time.Minute), redsync.WithTries(1))
				if err := m.TryLockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
			},
			keys: func(_ *Env, name string) []string { return []string{name} },
		},
	)
}

// MemResult is one library's memory per lock.
type MemResult struct {
	Lib          string
	Locks        int
	KeysPerLock  float64 // held
	UsagePerLock float64 // MEMORY USAGE bytes of a held lock's keys
	DeltaPerLock float64 // used_memory delta per held lock

	IdleKeysPerLock  float64 // after release
	IdleUsagePerLock float64
	IdleDeltaPerLock float64
	Err              error
}

// memSample is how many locks MEMORY USAGE is asked about.
const memSample = 1000

// MeasureMemory holds n locks of each library at once on env's own server.
func MeasureMemory(ctx context.Context, env *Env, n int) ([]MemResult, error) {
	if env.Redis == nil || !env.RedisOwned {
		return nil, errors.New("memory per lock needs a redis-server of this run's own (it flushes it)")
	}
	var out []MemResult
	for _, h := range memHolders {
		out = append(out, measureHolder(ctx, env, h, n))
	}
	if err := env.Redis.FlushAll(ctx).Err(); err != nil {
		return out, err
	}
	return out, nil
}

func measureHolder(ctx context.Context, e *Env, h memHolder, n int) MemResult {
	res := MemResult{Lib: h.lib, Locks: n}
	c := e.Redis
	fail := func(err error) MemResult { res.Err = err; return res }
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fail(err)
	}
	name := func(i int) string { return fmt.Sprintf("lock:%07d", i) }
	// A lock the server has seen once, so that scripts are cached and
	// lazily allocated structures exist before the baseline is read.
	rel, err := h.hold(ctx, e, "warmup")
	if err != nil {
		return fail(err)
	}
	if err := rel(ctx); err != nil {
		return fail(err)
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		return fail(err)
	}
	before, err := usedMemory(ctx, c)
	if err != nil {
		return fail(err)
	}
	releases := make([]func(context.Context) error, n)
	if err := parallelFor(n, Workers, func(i int) error {
		r, err := h.hold(ctx, e, name(i))
		releases[i] = r
		return err
	}); err != nil {
		return fail(err)
	}
	held, err := usedMemory(ctx, c)
	if err != nil {
		return fail(err)
	}
	dbsize, err := c.DBSize(ctx).Result()
	if err != nil {
		return fail(err)
	}
	res.KeysPerLock = float64(dbsize) / float64(n)
	res.DeltaPerLock = float64(held-before) / float64(n)
	if res.UsagePerLock, err = usagePerLock(ctx, c, e, h.keys, name, n); err != nil {
		return fail(err)
	}
	if err := parallelFor(n, Workers, func(i int) error { return releases[i](ctx) }); err != nil {
		return fail(err)
	}
	idle, err := usedMemory(ctx, c)
	if err != nil {
		return fail(err)
	}
	if dbsize, err = c.DBSize(ctx).Result(); err != nil {
		return fail(err)
	}
	res.IdleKeysPerLock = float64(dbsize) / float64(n)
	res.IdleDeltaPerLock = float64(idle-before) / float64(n)
	if h.idleKeys != nil {
		if res.IdleUsagePerLock, err = usagePerLock(ctx, c, e, h.idleKeys, name, n); err != nil {
			return fail(err)
		}
	}
	return res
}

// usagePerLock averages MEMORY USAGE (SAMPLES 0) of the keys of up to
// memSample locks, spread over all n.
func usagePerLock(ctx context.Context, c *goredis.Client, e *Env, keys func(*Env, string) []string, name func(int) string, n int) (float64, error) {
	step := max(n/memSample, 1)
	var total, locks int64
	for i := 0; i < n; i += step {
		for _, k := range keys(e, name(i)) {
			v, err := c.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return 0, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
			}
			total += v
		}
		locks++
	}
	return float64(total) / float64(locks), nil
}

// usedMemory reads used_memory from INFO memory.
func usedMemory(ctx context.Context, c *goredis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}

// parallelFor calls fn(i) for i in [0, n) on workers goroutines and returns
// the first error.
func parallelFor(n, workers int, fn func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("lock %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
