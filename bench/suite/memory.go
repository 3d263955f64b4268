package suite

import (
	"context"
	"errors"
	"sync"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/driver"
)

// The in-process adapter, against the least a fenced write could be: a map
// behind a mutex, copying the value as memory.Store does.

func init() {
	addGroup(Group{ID: "memory", Title: "adapters/memory, 1 goroutine",
		Kind: Latency, Needs: NeedNothing, NoPlot: true,
		Note: "The baseline copies the value into a map under a mutex: the floor for an in-process fenced write."})
	addCase(Case{Group: "memory", Name: "plain map+mutex write", Baseline: true, Op: benchMapWrite})
	addCase(Case{Group: "memory", Name: "Store.Put", Order: 1, Op: benchMemoryPut})
	addCase(Case{Group: "memory", Name: "Backend Acquire+Release", Order: 2, Op: benchMemoryBackend})
	addCase(Case{Group: "memory", Name: "Client TryAcquire+Release", Order: 3, Op: benchMemoryClient})
}

func benchMapWrite(e *Env) (op, error) {
	var mu sync.Mutex
	m := map[string][]byte{}
	key := "k"
	return func(context.Context) (bool, error) {
		v := make([]byte, len(e.Value))
		copy(v, e.Value)
		mu.Lock()
		m[key] = v
		mu.Unlock()
		return true, nil
	}, nil
}

func benchMemoryPut(e *Env) (op, error) {
	s := memory.NewStore()
	return func(ctx context.Context) (bool, error) {
		return true, s.Put(ctx, "k", 1, e.Value)
	}, nil
}

func benchMemoryBackend(e *Env) (op, error) {
	be := memory.NewBackend()
	owner, err := lock.NewOwner()
	if err != nil {
		return nil, err
	}
	req := driver.Request{Name: "k", Owner: owner, TTL: TTL, Kind: driver.Exclusive}
	claim := driver.Claim{Name: "k", Owner: owner, Kind: driver.Exclusive}
	return func(ctx context.Context) (bool, error) {
		if _, err := be.Acquire(ctx, req); err != nil {
			return false, err
		}
		return true, be.Release(ctx, claim)
	}, nil
}

func benchMemoryClient(e *Env) (op, error) {
	c := lock.New(memory.NewBackend(), nil)
	return func(ctx context.Context) (bool, error) {
		l, err := c.TryAcquire(ctx, "k", TTL)
		if err != nil {
			if errors.Is(err, lock.ErrHeld) {
				err = errors.Join(err, errUnexpected)
			}
			return false, err
		}
		return true, l.Release(ctx)
	}, nil
}
