package fencetest_test

import (
	"context"
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// store is a map-based fence.Store whose every step can be replaced, so
// that each store of the gallery is the correct store with one realistic
// defect. The zero value of each hook means the correct behaviour.
type store struct {
	mu   sync.Mutex
	data map[string]entry
	hooks
}

// hooks replace the steps of a store; nil means the correct step.
type hooks struct {
	ctxErr   func(ctx context.Context) error                    // before anything else
	keyOK    func(key string) error                             // every method
	getKeyOK func(key string) error                             // Get only; nil: keyOK
	tokenOK  func(op string, t fence.Token) error               // Put, Delete, Advance
	id       func(key string) string                            // how the store names a key
	refuse   func(op string, offered, current fence.Token) bool // the fence comparison
	stale    func(key string, offered, current fence.Token) error
	gap      func(op string)                                                 // called between check and write, unlocked
	apply    func(op string, e *entry, exists bool, t fence.Token, v []byte) // the write itself
	get      func(e entry) (fence.Record, error)
	after    func(ctx context.Context) error // after the write, unlocked
}

type entry struct {
	value []byte // nil: no value
	fence fence.Token
}

func (s *store) Put(ctx context.Context, key string, t fence.Token, v []byte) error {
	return s.write(ctx, "Put", key, t, v)
}

func (s *store) Delete(ctx context.Context, key string, t fence.Token) error {
	return s.write(ctx, "Delete", key, t, nil)
}

func (s *store) Advance(ctx context.Context, key string, t fence.Token) error {
	return s.write(ctx, "Advance", key, t, nil)
}

func (s *store) write(ctx context.Context, op, key string, t fence.Token, v []byte) error {
	if err := s.checkCtx(ctx); err != nil {
		return err
	}
	if err := s.checkKey(key); err != nil {
		return err
	}
	if s.tokenOK != nil {
		if err := s.tokenOK(op, t); err != nil {
			return err
		}
	} else if !t.Valid() {
		return fence.Invalid("token %d", t)
	}
	k := s.name(key)
	s.mu.Lock()
	if s.data == nil {
		s.data = map[string]entry{}
	}
	e, exists := s.data[k]
	refused := t < e.fence
	if s.refuse != nil {
		refused = s.refuse(op, t, e.fence)
	}
	if refused {
		s.mu.Unlock()
		if s.stale != nil {
			return s.stale(key, t, e.fence)
		}
		return fence.Stale(key, t, e.fence)
	}
	if s.gap != nil {
		s.mu.Unlock()
		s.gap(op)
		s.mu.Lock()
		e, exists = s.data[k]
	}
	if s.apply != nil {
		s.apply(op, &e, exists, t, v)
	} else {
		applyCorrectly(op, &e, t, v)
	}
	s.data[k] = e
	s.mu.Unlock()
	if s.after != nil {
		return s.after(ctx)
	}
	return nil
}

// applyCorrectly is the write as the contract wants it.
func applyCorrectly(op string, e *entry, t fence.Token, v []byte) {
	e.fence = t
	switch op {
	case "Put":
		e.value = append(make([]byte, 0, len(v)), v...)
	case "Delete":
		e.value = nil
	}
}

func (s *store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := s.checkCtx(ctx); err != nil {
		return fence.Record{}, err
	}
	if s.getKeyOK != nil {
		if err := s.getKeyOK(key); err != nil {
			return fence.Record{}, err
		}
	} else if err := s.checkKey(key); err != nil {
		return fence.Record{}, err
	}
	s.mu.Lock()
	e := s.data[s.name(key)]
	s.mu.Unlock()
	if s.get != nil {
		return s.get(e)
	}
	return getCorrectly(e)
}

func getCorrectly(e entry) (fence.Record, error) {
	if e.value == nil {
		return fence.Record{Fence: e.fence}, fence.ErrNotFound
	}
	return fence.Record{Value: append([]byte{}, e.value...), Fence: e.fence}, nil
}

func (s *store) checkCtx(ctx context.Context) error {
	if s.ctxErr != nil {
		return s.ctxErr(ctx)
	}
	return ctx.Err()
}

func (s *store) checkKey(key string) error {
	if s.keyOK != nil {
		return s.keyOK(key)
	}
	return fence.ValidateKey(key)
}

func (s *store) name(key string) string {
	if s.id != nil {
		return s.id(key)
	}
	return key
}

var _ fence.Store = (*store)(nil)
