package suite

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// The in-process adapter, against the least a fenced write could be: a map
// behind a mutex, copying the value as memory.Store does.

func init() {
	addGroup(Group{ID: "memory", Title: "adapters/memory, 1 goroutine",
		Kind: Latency, Needs: NeedNothing, NoPlot: true,
		Note: "The baseline copies the value into a map under a mutex: the floor for an in-process fenced write."})
	addCase(Case{Group: "memory", Name: "plain map+mutex write", Baseline: true, Run: benchMapWrite})
	addCase(Case{Group: "memory", Name: "Store.Put", Order: 1, Run: benchMemoryPut})
	addCase(Case{Group: "memory", Name: "Backend Acquire+Release", Order: 2, Run: benchMemoryBackend})
	addCase(Case{Group: "memory", Name: "Client TryAcquire+Release", Order: 3, Run: benchMemoryClient})
}

func benchMapWrite(b *testing.B, e *Env) {
	var mu sync.Mutex
	m := map[string][]byte{}
	key := "k"
	b.ReportAllocs()
	runSerial(b, e, func(context.Context) (bool, error) {
		v := make([]byte, len(e.Value))
		copy(v, e.Value)
		mu.Lock()
		m[key] = v
		mu.Unlock()
		return true, nil
	})
}

func benchMemoryPut(b *testing.B, e *Env) {
	s := memory.NewStore()
	runSerial(b, e, func(ctx context.Context) (bool, error) {
		return true, s.Put(ctx, "k", 1, e.Value)
	})
}

func benchMemoryBackend(b *testing.B, e *Env) {
	be := memory.NewBackend()
	owner, err := lock.NewOwner()
	if err != nil {
		e.fatal(b, err)
	}
	runSerial(b, e, func(ctx context.Context) (bool, error) {
		if _, err := be.Acquire(ctx, "k", owner, TTL); err != nil {
			return false, err
		}
		return true, be.Release(ctx, "k", owner)
	})
}

func benchMemoryClient(b *testing.B, e *Env) {
	c := lock.New(memory.NewBackend(), nil)
	runSerial(b, e, func(ctx context.Context) (bool, error) {
		l, err := c.TryAcquire(ctx, "k", TTL)
		if err != nil {
			if errors.Is(err, lock.ErrHeld) {
				err = errors.Join(err, errUnexpected)
			}
			return false, err
		}
		return true, l.Release(ctx)
	})
}
