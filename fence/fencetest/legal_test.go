package fencetest_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
)

// A correct store built in an unusual way, which the suite must pass.
type legalStore struct {
	name  string
	store func() fence.Store
}

func legal() []legalStore {
	return []legalStore{
		{"the gallery's base store", func() fence.Store { return &store{} }},
		{"memory adapter", func() fence.Store { return memory.NewStore() }},
		{"wraps every error", func() fence.Store { return wrapping{memory.NewStore()} }},
		{"slow, honours its context, may fail after writing", func() fence.Store {
			return slow{memory.NewStore(), 10 * time.Microsecond}
		}},
		{"compares tokens as decimal strings padded to 19 digits", compareAs(func(t fence.Token) string { return fmt.Sprintf("%019d", t) }, lt[string])},
		{"compares tokens as big-endian unsigned bytes", compareAs(bigEndian, func(a, b []byte) bool { return bytes.Compare(a, b) < 0 })},
		{"sharded over 16 locks", func() fence.Store { return newSharded(16) }},
		{"returns values with spare capacity", func() fence.Store {
			return &store{hooks: hooks{get: func(e entry) (fence.Record, error) {
				r, err := getCorrectly(e)
				if err == nil {
					r.Value = append(make([]byte, 0, len(r.Value)+64), r.Value...)
				}
				return r, err
			}}}
		}},
	}
}

// wrapping adds its own context to every error, keeping the chain.
type wrapping struct{ s fence.Store }

func (w wrapping) Put(ctx context.Context, key string, t fence.Token, v []byte) error {
	return wrap("put", key, w.s.Put(ctx, key, t, v))
}

func (w wrapping) Delete(ctx context.Context, key string, t fence.Token) error {
	return wrap("delete", key, w.s.Delete(ctx, key, t))
}

func (w wrapping) Advance(ctx context.Context, key string, t fence.Token) error {
	return wrap("advance", key, w.s.Advance(ctx, key, t))
}

func (w wrapping) Get(ctx context.Context, key string) (fence.Record, error) {
	r, err := w.s.Get(ctx, key)
	return r, wrap("get", key, err)
}

func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mystore: %s %q: %w", op, key, err)
}

// slow waits before and after each call, as a network round trip does, and
// gives up when its context ends: after the write, that is an unknown
// outcome for its caller.
type slow struct {
	s fence.Store
	d time.Duration
}

func (s slow) wait(ctx context.Context) error {
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s slow) around(ctx context.Context, call func() error) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	if err := call(); err != nil {
		return err
	}
	return s.wait(ctx)
}

func (s slow) Put(ctx context.Context, key string, t fence.Token, v []byte) error {
	return s.around(ctx, func() error { return s.s.Put(ctx, key, t, v) })
}

func (s slow) Delete(ctx context.Context, key string, t fence.Token) error {
	return s.around(ctx, func() error { return s.s.Delete(ctx, key, t) })
}

func (s slow) Advance(ctx context.Context, key string, t fence.Token) error {
	return s.around(ctx, func() error { return s.s.Advance(ctx, key, t) })
}

func (s slow) Get(ctx context.Context, key string) (r fence.Record, err error) {
	err = s.around(ctx, func() error {
		r, err = s.s.Get(ctx, key)
		return err
	})
	return r, err
}

// sharded spreads keys over independent memory stores.
type sharded struct {
	seed   maphash.Seed
	shards []*memory.Store
}

func newSharded(n int) *sharded {
	s := &sharded{seed: maphash.MakeSeed()}
	for range n {
		s.shards = append(s.shards, memory.NewStore())
	}
	return s
}

func (s *sharded) of(key string) *memory.Store {
	return s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

func (s *sharded) Put(ctx context.Context, key string, t fence.Token, v []byte) error {
	return s.of(key).Put(ctx, key, t, v)
}

func (s *sharded) Delete(ctx context.Context, key string, t fence.Token) error {
	return s.of(key).Delete(ctx, key, t)
}

func (s *sharded) Advance(ctx context.Context, key string, t fence.Token) error {
	return s.of(key).Advance(ctx, key, t)
}

func (s *sharded) Get(ctx context.Context, key string) (fence.Record, error) {
	return s.of(key).Get(ctx, key)
}
