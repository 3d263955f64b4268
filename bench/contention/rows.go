package contention

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencekit/fencekit/adapters/memory"
	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fenceotel"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// TTL is the lease of every row: far longer than a hold, so that no lease
// expires in a run.
const TTL = 10 * time.Second

type lockerFunc func(ctx context.Context) (func(context.Context) error, error)

func (f lockerFunc) Lock(ctx context.Context) (func(context.Context) error, error) { return f(ctx) }

// Rows returns the rows: the in-process FIFO floor, fencekit's memory and
// Redis backends polling (as before queued waiting) and queued, the queued
// Redis backend through fenceotel, and the peer libraries on the same
// Redis. rc is nil to leave out the Redis rows.
func Rows(rc *goredis.Client) []Row {
	fifo := func() Row {
		m := &fifoMutex{}
		return Row{Name: "FIFO mutex, in-process (floor)", New: func(string, int) (Locker, error) {
			return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
				if err := m.lock(ctx); err != nil {
					return nil, err
				}
				return func(context.Context) error { m.unlock(); return nil }, nil
			}), nil
		}}
	}
	fencekit := func(name string, b driver.Backend, redis *goredis.Client, polling bool) Row {
		return Row{Name: name, Redis: redis, New: func(lockName string, _ int) (Locker, error) {
			c := lock.New(b, &lock.Options{Queue: lock.QueueOptions{Polling: polling}})
			return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
				l, err := c.Acquire(ctx, lockName, TTL)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}), nil
		}}
	}
	rows := []Row{
		fifo(),
		fencekit("fencekit memory, polling (before)", memory.NewBackend(), nil, true),
		fencekit("fencekit memory, queued (after)", memory.NewBackend(), nil, false),
	}
	if rc == nil {
		return rows
	}
	b := fenceredis.NewBackend(rc, &fenceredis.BackendOptions{Prefix: "fkcontention"})
	redislockRow := func(name string, retry redislock.RetryStrategy) Row {
		rl := redislock.New(rc)
		return Row{Name: name, Redis: rc, New: func(lockName string, _ int) (Locker, error) {
			return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
				l, err := rl.Obtain(ctx, lockName, TTL, &redislock.Options{RetryStrategy: retry})
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}), nil
		}}
	}
	rs := redsync.New(redsyncgoredis.NewPool(rc))
	// Each worker a process of its own: its own go-redis client, Backend
	// and pub/sub connection.
	perWorker := Row{Name: "fencekit Redis, queued, a client per worker", Redis: rc, New: func(lockName string, _ int) (Locker, error) {
		own := goredis.NewClient(&goredis.Options{Addr: rc.Options().Addr, PoolSize: 4})
		c := lock.New(fenceredis.NewBackend(own, &fenceredis.BackendOptions{Prefix: "fkcontention"}), nil)
		return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.Acquire(ctx, lockName, TTL)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}), nil
	}}
	return append(rows,
		fencekit("fencekit Redis, polling (before)", b, rc, true),
		fencekit("fencekit Redis, queued (after)", b, rc, false),
		fencekit("fencekit Redis through fenceotel, queued", traced(b), rc, false),
		perWorker,
		redislockRow("bsm/redislock, linear 10ms", redislock.LinearBackoff(10*time.Millisecond)),
		redislockRow("bsm/redislock, exponential 10ms..1s", redislock.ExponentialBackoff(10*time.Millisecond, time.Second)),
		Row{Name: "go-redsync (its default retry delay)", Redis: rc, New: func(lockName string, _ int) (Locker, error) {
			return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
				m := rs.NewMutex(lockName, redsync.WithExpiry(TTL), redsync.WithTries(1<<30))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
			}), nil
		}},
	)
}

// traced wraps b in fenceotel's Backend, on the OpenTelemetry SDK as
// fenceotel's own benchmark sets it up: a meter provider with a manual
// reader, and a tracer provider that samples every span and ends it but has
// no span processor (as if an exporter batched them elsewhere). Every
// driver call (Acquire, Release, Await, Leave) then makes a span and a
// histogram point, and every Acquire two counter points.
func traced(b driver.Backend) driver.Backend {
	tel, err := fenceotel.New(&fenceotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		TracerProvider: sdktrace.NewTracerProvider(),
	})
	if err != nil {
		panic(err) // the SDK's meter refuses none of fenceotel's instruments
	}
	return tel.Backend(b)
}
