package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
)

// A holder whose lease expired writes after the next holder: the store
// refuses the late write, and says why.
func ExampleStore() {
	ctx := context.Background()
	var store fence.Store = memory.NewStore()

	_ = store.Put(ctx, "invoice/42", 8, []byte("sent by worker B"))    // B holds token 8
	err := store.Put(ctx, "invoice/42", 7, []byte("sent by worker A")) // A wakes up with token 7

	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("refused: token %d is below fence %d\n", stale.Token, stale.Fence)
	}
	rec, _ := store.Get(ctx, "invoice/42")
	fmt.Printf("%s (fence %d)\n", rec.Value, rec.Fence)
	// Output:
	// refused: token 7 is below fence 8
	// sent by worker B (fence 8)
}

// A read-modify-write under a lock is Advance, then Get, then Put: the
// Advance shuts out every older holder before the read.
func ExampleStore_readModifyWrite() {
	ctx := context.Background()
	store := memory.NewStore()
	_ = store.Put(ctx, "balance", 1, []byte("100"))

	const token = 2 // from the lease
	if err := store.Advance(ctx, "balance", token); err != nil {
		fmt.Println("someone newer holds the lock:", err)
		return
	}
	rec, _ := store.Get(ctx, "balance")
	fmt.Printf("read %s at fence %d\n", rec.Value, rec.Fence)
	fmt.Println(store.Put(ctx, "balance", token, []byte("150")))
	fmt.Println(errors.Is(store.Put(ctx, "balance", 1, []byte("90")), fence.ErrStale))
	// Output:
	// read 100 at fence 2
	// <nil>
	// true
}

// lostReply is a Store whose first Put is applied but whose reply is lost,
// as when a connection is cut after the server executed the write.
type lostReply struct {
	fence.Store
	lost bool
}

func (s *lostReply) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	err := s.Store.Put(ctx, key, token, value)
	if !s.lost {
		s.lost = true
		return errors.New("read tcp 127.0.0.1:6379: connection reset by peer")
	}
	return err
}

// An error that matches neither ErrStale nor ErrInvalid leaves the outcome
// unknown: the write may have landed. Retrying with the same token is safe,
// since a store accepts a token equal to its fence: the retry succeeds
// whether or not the first send landed, unless a newer holder has written
// since (then it is stale, and the first send may or may not have landed
// before the newer holder's write).
func ExampleStore_retryUnknownOutcome() {
	ctx := context.Background()
	store := &lostReply{Store: memory.NewStore()}
	const token = 5 // from the lease

	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		err = store.Put(ctx, "invoice/42", token, []byte("sent"))
		if err == nil || errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrInvalid) || ctx.Err() != nil {
			break // the outcome is known, or the caller gave up
		}
		fmt.Printf("attempt %d: outcome unknown (%v)\n", attempt, err)
	}
	fmt.Println("result:", err)
	rec, _ := store.Get(ctx, "invoice/42")
	fmt.Printf("%s (fence %d)\n", rec.Value, rec.Fence)
	// Output:
	// attempt 1: outcome unknown (read tcp 127.0.0.1:6379: connection reset by peer)
	// result: <nil>
	// sent (fence 5)
}
