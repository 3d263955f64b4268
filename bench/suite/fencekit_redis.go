package suite

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	fenceredis "github.com/fencekit/fencekit/adapters/redis"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// fencekit on Redis: the portable Client (TryAcquire + Lease.Release, what an
// application calls) and the raw Backend (Acquire + Release with one owner
// per worker), both over adapters/redis with its default options.

func init() {
	addLockImpl(lockImpl{name: "fencekit Client", order: 2, newWorker: newFencekitClientWorker})
	addLockImpl(lockImpl{name: "fencekit Backend", order: 3, newWorker: newFencekitBackendWorker})

	addCase(Case{Group: "redis-write-1", Name: "fencekit Store.Put", Order: 1, Op: benchFencedPut1})
	addCase(Case{Group: "redis-write-32", Name: "fencekit Store.Put", Order: 1, Run: benchFencedPut32})
	addCase(Case{Group: "redis-read-1", Name: "fencekit Store.Get", Order: 1, Op: benchFencedGet1})
}

func (e *Env) fencekitBackend() *fenceredis.Backend { return fenceredis.NewBackend(e.Redis, nil) }
func (e *Env) fencekitStore() *fenceredis.Store     { return fenceredis.NewStore(e.Redis, nil) }

type fencekitClientWorker struct{ c *lock.Client }

func newFencekitClientWorker(e *Env, _ int) cycle {
	return fencekitClientWorker{c: lock.New(e.fencekitBackend(), nil)}
}

func (w fencekitClientWorker) cycle(ctx context.Context, key string) (bool, error) {
	l, err := w.c.TryAcquire(ctx, key, TTL)
	if errors.Is(err, lock.ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, l.Release(ctx)
}

type fencekitBackendWorker struct {
	b     *fenceredis.Backend
	owner string
}

func newFencekitBackendWorker(e *Env, _ int) cycle {
	owner, err := lock.NewOwner()
	if err != nil {
		panic(err)
	}
	return fencekitBackendWorker{b: e.fencekitBackend(), owner: owner}
}

func (w fencekitBackendWorker) cycle(ctx context.Context, key string) (bool, error) {
	_, err := w.b.Acquire(ctx, driver.Request{Name: key, Owner: w.owner, TTL: TTL, Kind: driver.Exclusive})
	if errors.Is(err, lock.ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, w.b.Release(ctx, driver.Claim{Name: key, Owner: w.owner, Kind: driver.Exclusive})
}

func benchFencedPut1(e *Env) (op, error) {
	s := e.fencekitStore()
	key := e.Key("put", "lat")
	return func(ctx context.Context) (bool, error) {
		return true, s.Put(ctx, key, 1, e.Value)
	}, nil
}

func benchFencedPut32(b *testing.B, e *Env) {
	s := e.fencekitStore()
	st := runWorkers(b, e, Workers, func(w int) op {
		key := e.Key("put", "tp", w)
		return func(ctx context.Context) (bool, error) { return true, s.Put(ctx, key, 1, e.Value) }
	})
	b.ReportMetric(float64(b.N)/st.Elapsed.Seconds(), "ops/s")
}

func benchFencedGet1(e *Env) (op, error) {
	s := e.fencekitStore()
	ctx := context.Background()
	key := e.Key("get", "fenced")
	if err := s.Put(ctx, key, 1, e.Value); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (bool, error) {
		rec, err := s.Get(ctx, key)
		if err == nil && (len(rec.Value) != len(e.Value) || rec.Fence != fence.Token(1)) {
			err = fmt.Errorf("fencekit Store.Get: got %d bytes, fence %d: %w", len(rec.Value), rec.Fence, errUnexpected)
		}
		return true, err
	}, nil
}

func init() {
	fk := func(r *RTEnv) *lock.Client { return lock.New(fenceredis.NewBackend(r.Redis, nil), nil) }
	addLockRT("Redis", "fk", fk)
	addShapeRT("Redis", "fk", fk)
	addRT(RTCase{Store: "Redis", Op: "write", Lib: "fencekit Store.Put", Run: func(ctx context.Context, r *RTEnv) error {
		s := fenceredis.NewStore(r.Redis, nil)
		return r.Measure(func() error { return s.Put(ctx, r.Key("rt", "put"), 1, r.Value) })
	}})
	addRT(RTCase{Store: "Redis", Op: "read", Lib: "fencekit Store.Get", Run: func(ctx context.Context, r *RTEnv) error {
		s := fenceredis.NewStore(r.Redis, nil)
		return r.Measure(func() error { _, err := s.Get(ctx, r.Key("rt", "put")); return err })
	}})
}

func init() {
	memHolders = append(memHolders, memHolder{lib: "fencekit",
		hold: func(ctx context.Context, e *Env, name string) (func(context.Context) error, error) {
			owner, err := lock.NewOwner()
			if err != nil {
				return nil, err
			}
			b := e.fencekitBackend()
			if _, err := b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: 10 * time.Minute, Kind: driver.Exclusive}); err != nil {
				return nil, err
			}
			claim := driver.Claim{Name: name, Owner: owner, Kind: driver.Exclusive}
			return func(ctx context.Context) error { return b.Release(ctx, claim) }, nil
		},
		keys: func(e *Env, name string) []string {
			b := e.fencekitBackend()
			return []string{b.LeaseKey(name), b.CounterKey(name)}
		},
		idleKeys: func(e *Env, name string) []string { return []string{e.fencekitBackend().CounterKey(name)} },
	})
}
