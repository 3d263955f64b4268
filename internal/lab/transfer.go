package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// transferPaused plays the classic failure for a set of locks: a money
// transfer between two accounts, each account's record guarded by a lock
// name of its own and written with that name's token. Both accounts start
// at 100. Transfer A takes both names with DoMulti (keep-alive off: a
// paused process renews nothing), reads account X, and pauses past its TTL.
// Transfer B takes both names and moves 30 from X to Y, and completes. A
// wakes, still believing it holds the set: it debits X by 50 from the
// balance it read before the pause, reads Y (B's credit included) and
// credits it by 50. Without fencing both writes land and the total grows
// to 230; fenced, the store refuses both as stale (each with its own
// name's token), B's balances stand and the total stays 200. DoMulti tells
// A afterwards that its set was lost.
func transferPaused(ctx context.Context, l *lab) result {
	x, y := l.prefix+"account:x", l.prefix+"account:y"
	for _, key := range []string{x, y} {
		if err := l.store.Put(ctx, key, 1, []byte("100")); err != nil {
			return failed(err)
		}
	}
	names := []string{x + ":lock", y + ":lock"}
	balance := func(key string) (int, error) {
		rec, err := l.store.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(rec.Value))
	}

	var (
		tokA, tokB            [2]fence.Token
		errDebitA, errCreditA error
		errDebitB, errCreditB error
		errDoB                error
		setupErr              error
		doneA                 bool
	)
	errDoA := l.client.DoMulti(ctx, names, l.ttl, func(_ context.Context, set *lock.MultiLease) error {
		tokA = [2]fence.Token{set.Token(names[0]), set.Token(names[1])}
		fromX, err := balance(x)
		if err != nil {
			setupErr = err
			return err
		}
		// A pauses (a GC, a swapped-out VM) until both leases ran out.
		for _, n := range names {
			if err := waitFree(ctx, l.backend, n); err != nil {
				setupErr = err
				return err
			}
		}
		// B, another process, transfers 30 from X to Y and completes.
		errDoB = lock.New(l.backend, nil).TryDoMulti(ctx, names, 10*l.ttl, func(ctx context.Context, set *lock.MultiLease) error {
			tokB = [2]fence.Token{set.Token(names[0]), set.Token(names[1])}
			bx, err := balance(x)
			if err != nil {
				return err
			}
			by, err := balance(y)
			if err != nil {
				return err
			}
			errDebitB = set.Lease(names[0]).Fenced(l.store).Put(ctx, x, []byte(strconv.Itoa(bx-30)))
			errCreditB = set.Lease(names[1]).Fenced(l.store).Put(ctx, y, []byte(strconv.Itoa(by+30)))
			return errors.Join(errDebitB, errCreditB)
		})
		if errDoB != nil {
			setupErr = errDoB
			return errDoB
		}
		// A wakes and finishes its transfer of 50 with the scenario's
		// context: the pause hid the loss of its set from it.
		errDebitA = set.Lease(names[0]).Fenced(l.store).Put(ctx, x, []byte(strconv.Itoa(fromX-50)))
		toY, err := balance(y)
		if err != nil {
			setupErr = err
			return err
		}
		errCreditA = set.Lease(names[1]).Fenced(l.store).Put(ctx, y, []byte(strconv.Itoa(toY+50)))
		doneA = true
		return errors.Join(errDebitA, errCreditA)
	}, lock.WithKeepAlive(false))
	if setupErr != nil {
		return failed(setupErr)
	}
	if !doneA {
		return failed(fmt.Errorf("transfer A did not run: %w", errDoA))
	}
	bx, err := balance(x)
	if err != nil {
		return failed(err)
	}
	by, err := balance(y)
	if err != nil {
		return failed(err)
	}
	obs := fmt.Sprintf("A (tokens %d, %d) pauses; B (tokens %d, %d) moves 30 X->Y: debit %v, credit %v | A wakes and moves 50: debit X %v, credit Y %v, DoMulti reports the set lost: %v | balances X %d + Y %d = %d (was 200)",
		tokA[0], tokA[1], tokB[0], tokB[1], outcome(errDebitB), outcome(errCreditB),
		outcome(errDebitA), outcome(errCreditA), errors.Is(errDoA, lock.ErrLost), bx, by, bx+by)
	return expect(obs, errDebitB == nil && errCreditB == nil &&
		errors.Is(errDebitA, fence.ErrStale) && errors.Is(errCreditA, fence.ErrStale) &&
		errors.Is(errDoA, lock.ErrLost) && tokB[0] > tokA[0] && tokB[1] > tokA[1] &&
		bx == 70 && by == 130,
		"B's transfer accepted, both of A's writes refused as stale, X 70 + Y 130 = 200")
}
