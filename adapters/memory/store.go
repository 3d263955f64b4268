package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

var _ fence.Store = (*Store)(nil)

// Store is an in-process fence.Store. The zero value is not usable; call
// NewStore.
type Store struct {
	mu   sync.Mutex
	keys map[string]entry
}

type entry struct {
	value []byte // nil: no value (tombstone or advanced only)
	fence fence.Token
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{keys: map[string]entry{}} }

// Put stores a copy of value under key if token >= the key's fence.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	v := make([]byte, len(value)) // non-nil even when empty: nil marks "no value"
	copy(v, value)
	return s.write(ctx, key, token, func(e *entry) { e.value = v })
}

// Delete removes key's value if token >= its fence, keeping the fence.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, func(e *entry) { e.value = nil })
}

// Advance raises key's fence to token if token >= it, keeping the value.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, func(*entry) {})
}

// write is the one fenced critical section behind Put, Delete and Advance.
func (s *Store) write(ctx context.Context, key string, token fence.Token, apply func(*entry)) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if token < e.fence {
		return fence.Stale(key, token, e.fence)
	}
	e.fence = token
	apply(&e)
	s.keys[key] = e
	return nil
}

// Get returns a copy of key's value and its fence.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return fence.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e.value == nil {
		return fence.Record{Fence: e.fence}, fmt.Errorf("%w: %q", fence.ErrNotFound, key)
	}
	v := make([]byte, len(e.value))
	copy(v, e.value)
	return fence.Record{Value: v, Fence: e.fence}, nil
}
