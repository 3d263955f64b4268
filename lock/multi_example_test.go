package lock_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
)

// A transfer between two accounts holds both accounts' locks at once, and
// writes each account's row fenced with the token of that account's own
// lock, so that each row refuses a writer whose lease on it was superseded.
// A transfer the other way ({bob, alice}) cannot deadlock with this one.
func ExampleClient_DoMulti() {
	ctx := context.Background()
	locks := lock.New(memory.NewBackend(), nil)
	store := memory.NewStore()
	for _, acct := range []string{"alice", "bob"} {
		_ = store.Put(ctx, "balance/"+acct, 1, []byte("100")) // opened under token 1
	}

	transfer := func(from, to string, amount int) error {
		return locks.DoMulti(ctx, []string{"account/" + from, "account/" + to}, time.Minute,
			func(ctx context.Context, set *lock.MultiLease) error {
				src := set.Lease("account/" + from).Fenced(store)
				dst := set.Lease("account/" + to).Fenced(store)
				a, err := balance(ctx, src, from)
				if err != nil {
					return err
				}
				b, err := balance(ctx, dst, to)
				if err != nil {
					return err
				}
				if err := src.Put(ctx, "balance/"+from, []byte(strconv.Itoa(a-amount))); err != nil {
					return err // fence.ErrStale: a newer holder of from's lock exists
				}
				return dst.Put(ctx, "balance/"+to, []byte(strconv.Itoa(b+amount)))
			})
	}
	fmt.Println(transfer("alice", "bob", 30), transfer("bob", "alice", 10))
	for _, acct := range []string{"alice", "bob"} {
		rec, _ := store.Get(ctx, "balance/"+acct)
		fmt.Printf("%s %s\n", acct, rec.Value)
	}
	// Output:
	// <nil> <nil>
	// alice 80
	// bob 120
}

func balance(ctx context.Context, w *lock.Writer, acct string) (int, error) {
	rec, err := w.Get(ctx, "balance/"+acct)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(rec.Value))
}
