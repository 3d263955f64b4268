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
