package fencetest_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
)

// buggyStore is a fence.Store with one deliberate defect, to show that the
// suite notices it.
type buggyStore struct {
	mu   sync.Mutex
	keys map[string]buggyEntry
	// less decides whether offered is below current; a correct store uses <.
	less func(offered, current fence.Token) bool
	// dropFence makes Delete remove the fence along with the value.
	dropFence bool
	// skipValidation accepts any token.
	skipValidation bool
}

type buggyEntry struct {
	value []byte
	fence fence.Token
}

func newBuggy(configure func(*buggyStore)) *buggyStore {
	s := &buggyStore{keys: map[string]buggyEntry{}, less: func(a, b fence.Token) bool { return a < b }}
	configure(s)
	return s
}

func (s *buggyStore) write(ctx context.Context, key string, token fence.Token, apply func(*buggyEntry)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !s.skipValidation {
		if err := fence.ValidateWrite(key, token); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if s.less(token, e.fence) {
		return fence.Stale(key, token, e.fence)
	}
	e.fence = token
	apply(&e)
	s.keys[key] = e
	return nil
}

func (s *buggyStore) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	v := append([]byte{}, value...)
	return s.write(ctx, key, token, func(e *buggyEntry) { e.value = v })
}

func (s *buggyStore) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, func(e *buggyEntry) {
		e.value = nil
		if s.dropFence {
			e.fence = 0
		}
	})
}

func (s *buggyStore) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, func(*buggyEntry) {})
}

func (s *buggyStore) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := ctx.Err(); err != nil {
		return fence.Record{}, err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e.value == nil {
		return fence.Record{Fence: e.fence}, fence.ErrNotFound
	}
	return fence.Record{Value: append([]byte{}, e.value...), Fence: e.fence}, nil
}

// failures runs every check against s and returns the names that failed.
func failures(t *testing.T, s fence.Store) map[string]error {
	t.Helper()
	failed := map[string]error{}
	for _, c := range fencetest.Checks() {
		if err := c.Run(context.Background(), s, fencetest.Namespace()); err != nil {
			failed[c.Name] = err
		}
	}
	return failed
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	cases := []struct {
		name      string
		store     fence.Store
		mustFail  []string
		mustPass  []string
		rationale string
	}{
		{
			name:     "accepts lower tokens",
			store:    newBuggy(func(s *buggyStore) { s.less = func(fence.Token, fence.Token) bool { return false } }),
			mustFail: []string{"LowerTokenRefused", "DeleteStaleRefused", "AdvanceRefusesOlderHolders", "AdvanceStaleRefused", "ReadModifyWrite", "ExactComparison", "DeleteKeepsFence"},
			mustPass: []string{"PutThenGet", "HigherTokenAccepted", "EqualTokenAccepted"},
		},
		{
			name:     "refuses equal tokens",
			store:    newBuggy(func(s *buggyStore) { s.less = func(a, b fence.Token) bool { return a <= b } }),
			mustFail: []string{"EqualTokenAccepted"},
			mustPass: []string{"LowerTokenRefused"},
		},
		{
			name:     "delete drops the fence",
			store:    newBuggy(func(s *buggyStore) { s.dropFence = true }),
			mustFail: []string{"DeleteKeepsFence", "DeleteMissingKeyLeavesTombstone"},
			mustPass: []string{"LowerTokenRefused", "AdvanceRefusesOlderHolders", "ExactComparison"},
		},
		{
			name: "compares as float64",
			store: newBuggy(func(s *buggyStore) {
				s.less = func(a, b fence.Token) bool { return float64(a) < float64(b) }
			}),
			mustFail: []string{"ExactComparison"},
			mustPass: []string{"LowerTokenRefused", "DeleteKeepsFence"},
		},
		{
			name: "compares unpadded decimal strings",
			store: newBuggy(func(s *buggyStore) {
				s.less = func(a, b fence.Token) bool { return strconv.FormatInt(int64(a), 10) < strconv.FormatInt(int64(b), 10) }
			}),
			mustFail: []string{"ExactComparison"},
			mustPass: []string{"LowerTokenRefused"},
		},
		{
			name:     "accepts token 0",
			store:    newBuggy(func(s *buggyStore) { s.skipValidation = true }),
			mustFail: []string{"InvalidInputWritesNothing"},
			mustPass: []string{"LowerTokenRefused", "ExactComparison"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed := failures(t, c.store)
			for _, name := range c.mustFail {
				if _, ok := failed[name]; !ok {
					t.Errorf("check %s passed on a store that %s", name, c.name)
				}
			}
			for _, name := range c.mustPass {
				if err, ok := failed[name]; ok {
					t.Errorf("check %s failed on a store whose only defect is that it %s: %v", name, c.name, err)
				}
			}
		})
	}
}

func TestSuitePassesMemoryStore(t *testing.T) {
	if failed := failures(t, memory.NewStore()); len(failed) > 0 {
		t.Fatalf("checks failed on the memory store: %v", failed)
	}
}

func TestChecksHaveUniqueNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range fencetest.Checks() {
		if seen[c.Name] || c.Name == "" || c.Run == nil {
			t.Errorf("check %q is duplicated, unnamed or empty", c.Name)
		}
		seen[c.Name] = true
	}
	if len(seen) < 15 {
		t.Errorf("only %d checks", len(seen))
	}
}

func ExampleRun() {
	// In a _test.go file of your store's package:
	//
	//	func TestConformance(t *testing.T) {
	//		fencetest.Run(t, func(t *testing.T) fence.Store { return mystore.New() })
	//	}
	for _, c := range fencetest.Checks()[:3] {
		fmt.Println(c.Name)
	}
	// Output:
	// PutThenGet
	// HigherTokenAccepted
	// EqualTokenAccepted
}
