package dynamodb_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// Many contenders on one name, spread over four Backends as over four
// processes (each judges expiry by its own watching): every worker waits
// in line and, holding the lock, increments a counter in the Store with
// its token. No increment is lost, every lease's token is new and above
// every earlier one, and every worker finishes its cycles.
func TestManyBackendsOneName(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	store := storeWithPrefix(t, srv, prefix+"data/")
	const backends, perBackend, cycles = 4, 4, 5

	var mu sync.Mutex
	var tokens []fence.Token
	var wg sync.WaitGroup
	errs := make(chan error, backends*perBackend)
	for i := 0; i < backends; i++ {
		client := lock.New(newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix + "lock/"}), nil)
		for j := 0; j < perBackend; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := 0; c < cycles; c++ {
					err := client.Do(ctx, "counter", 5*time.Second, func(ctx context.Context, l *lock.Lease) error {
						rec, err := store.Get(ctx, "n")
						if err != nil && !errors.Is(err, fence.ErrNotFound) {
							return err
						}
						var n uint64
						if len(rec.Value) == 8 {
							n = binary.BigEndian.Uint64(rec.Value)
						}
						mu.Lock()
						tokens = append(tokens, l.Token())
						mu.Unlock()
						return l.Fenced(store).Put(ctx, "n", binary.BigEndian.AppendUint64(nil, n+1))
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a worker failed: %v", err)
	}
	rec, err := store.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(backends * perBackend * cycles)
	if got := binary.BigEndian.Uint64(rec.Value); got != want {
		t.Fatalf("counter %d after %d increments: lost some", got, want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("lease %d's token %d is not above the one before it, %d: %v", i, tokens[i], tokens[i-1], tokens)
		}
	}
}
