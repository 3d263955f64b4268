package drivertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// backendChecks are the checks of a lock (Kind Exclusive, one name, no
// place), called on the driver directly: tokens, exclusion, renewal,
// release, expiry, names and owners, contexts, TTLs, and bad input (through
// a Client, input_checks.go).
func backendChecks() []Check {
	return []Check{
		{"AcquireFreeLock", checkAcquireFree},
		{"InspectFreeLock", checkInspectFree},
		{"MutualExclusion", checkMutualExclusion},
		{"SameOwnerReacquireKeepsToken", checkSameOwnerReacquire},
		{"TokensIncreaseAcrossRelease", checkTokensAcrossRelease},
		{"TokensIncreaseAcrossExpiry", checkTokensAcrossExpiry},
		{"ReusedOwnerAfterReleaseGetsNewToken", checkReusedOwnerAfterRelease},
		{"ReusedOwnerAfterExpiryGetsNewToken", checkReusedOwnerAfterExpiry},
		{"ReleaseFreesLock", checkReleaseFrees},
		{"WrongOwnerReleaseRefused", checkWrongOwnerRelease},
		{"WrongOwnerExtendRefused", checkWrongOwnerExtend},
		{"ExtendProlongsLease", checkExtendProlongs},
		{"ExtendAfterExpiryNeverRecreates", checkExtendAfterExpiry},
		{"LateReleaseLeavesNewHolder", checkLateRelease},
		{"NamesAreIndependent", checkNamesIndependent},
		{"ConcurrentAcquirersOneWinner", checkConcurrentAcquirers},
		{"InvalidInputRefused", checkClientInvalid},
		{"LongestNameAndOwnerAccepted", checkLongestInput},
		{"OwnersComparedExactly", checkOwnersExact},
		{"CancelledContextTakesNothing", checkBackendCancelled},
		{"InspectReportsRemainingTTL", checkInspectRemaining},
		{"HeldErrorReportsRemainingTTL", checkHeldErrorTTL},
		{"ExtendSetsTTLFromNow", checkExtendFromNow},
		{"WrongOwnerExtendKeepsTTL", checkWrongOwnerExtendTTL},
		{"LeaseLastsItsTTL", checkLeaseLasts},
	}
}

func checkAcquireFree(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	return expectLease(ctx, b, name, a, tok, longTTL, w)
}

func checkInspectFree(ctx context.Context, b driver.Backend, ns string) error {
	info, err := inspect(ctx, b, ns+"never")
	if err != nil {
		return fmt.Errorf("Inspect of a never-used lock: %w", err)
	}
	if info != (lockInfo{Name: ns + "never"}) {
		return fmt.Errorf("Inspect of a never-used lock = %+v; want free with zero owner, token, TTL and metadata, and nobody in line", info)
	}
	return nil
}

func checkMutualExclusion(ctx context.Context, b driver.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	_, err = take(ctx, b, name, c, longTTL)
	if !errors.Is(err, driver.ErrHeld) {
		return fmt.Errorf("Acquire by a second owner while held: %v; want an error matching driver.ErrHeld", err)
	}
	var held *driver.HeldError
	if errors.As(err, &held) && (held.TTL < 0 || held.TTL > longTTL) {
		return fmt.Errorf("HeldError.TTL = %v; want in [0, %v]", held.TTL, longTTL)
	}
	return expectHolder(ctx, b, name, a, tok)
}

func checkSameOwnerReacquire(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, time.Second)
	if err != nil {
		return err
	}
	var again fence.Token
	w := timed(func() { again, err = take(ctx, b, name, a, longTTL) })
	if err != nil {
		return fmt.Errorf("re-Acquire by the holder: %w", err)
	}
	if again != tok {
		return fmt.Errorf("re-Acquire by the holder minted token %d; want the same token %d", again, tok)
	}
	if err := expectLease(ctx, b, name, a, tok, longTTL, w); err != nil {
		return fmt.Errorf("after a re-Acquire by the holder for %v: %w", longTTL, err)
	}
	// Shorter too: the lease is renewed to ttl from now, whatever it was.
	const shorter = 1234 * time.Millisecond
	w = timed(func() { again, err = take(ctx, b, name, a, shorter) })
	if err != nil || again != tok {
		return fmt.Errorf("second re-Acquire by the holder: token %d, error %v; want token %d", again, err, tok)
	}
	if err := expectLease(ctx, b, name, a, tok, shorter, w); err != nil {
		return fmt.Errorf("after a re-Acquire by the holder for %v: %w", shorter, err)
	}
	return nil
}

func checkTokensAcrossRelease(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	var last fence.Token
	for i := 0; i < 5; i++ {
		o := owner()
		tok, err := acquire(ctx, b, name, o, longTTL)
		if err != nil {
			return err
		}
		if tok <= last {
			return fmt.Errorf("acquisition %d minted token %d after %d; tokens must strictly increase", i+1, tok, last)
		}
		last = tok
		if err := release(ctx, b, name, o); err != nil {
			return fmt.Errorf("Release by the holder: %w", err)
		}
	}
	return nil
}

func checkTokensAcrossExpiry(ctx context.Context, b driver.Backend, ns string) error {
	name := ns + "l"
	var last fence.Token
	for i := 0; i < 3; i++ {
		start := time.Now()
		tok, err := acquire(ctx, b, name, owner(), shortTTL)
		if err != nil {
			return err
		}
		if tok <= last {
			return fmt.Errorf("acquisition %d after expiry minted token %d after %d; tokens must strictly increase", i+1, tok, last)
		}
		last = tok
		if _, err := waitExpiry(ctx, b, name, start, shortTTL); err != nil {
			return err
		}
	}
	return nil
}

func checkReleaseFrees(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	if _, err := acquire(ctx, b, name, a, longTTL); err != nil {
		return err
	}
	if err := release(ctx, b, name, a); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return err
	}
	if err := expectIs("second Release", release(ctx, b, name, a), driver.ErrNotHeld); err != nil {
		return err
	}
	_, err := acquire(ctx, b, name, owner(), longTTL)
	return err
}

func checkWrongOwnerRelease(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, w, err := acquireTimed(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	return first(
		expectIs("Release by another owner", release(ctx, b, name, owner()), driver.ErrNotHeld),
		expectLease(ctx, b, name, a, tok, longTTL, w),
		expectIs("Release of a free lock", release(ctx, b, ns+"free", owner()), driver.ErrNotHeld),
		expectFree(ctx, b, ns+"free"),
	)
}

func checkWrongOwnerExtend(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	return first(
		expectIs("Extend by another owner", extend(ctx, b, name, owner(), longTTL), driver.ErrNotHeld),
		expectHolder(ctx, b, name, a, tok),
		expectIs("Extend of a free lock", extend(ctx, b, ns+"free", owner(), longTTL), driver.ErrNotHeld),
		expectFree(ctx, b, ns+"free"),
	)
}

func checkExtendProlongs(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, 200*time.Millisecond)
	if err != nil {
		return err
	}
	w := timed(func() { err = extend(ctx, b, name, a, longTTL) })
	if err != nil {
		return fmt.Errorf("Extend by the holder: %w", err)
	}
	if err := expectLease(ctx, b, name, a, tok, longTTL, w); err != nil {
		return fmt.Errorf("after Extend to %v: %w", longTTL, err)
	}
	return nil
}

func checkExtendAfterExpiry(ctx context.Context, b driver.Backend, ns string) error {
	name, a := ns+"l", owner()
	start := time.Now()
	if _, err := acquire(ctx, b, name, a, shortTTL); err != nil {
		return err
	}
	if _, err := waitExpiry(ctx, b, name, start, shortTTL); err != nil {
		return err
	}
	return first(
		expectIs("Extend after expiry", extend(ctx, b, name, a, longTTL), driver.ErrNotHeld),
		expectFree(ctx, b, name),
		expectIs("Release after expiry", release(ctx, b, name, a), driver.ErrNotHeld),
	)
}

// checkLateRelease is the article's classic bug: A's lease expires, B takes
// the lock, and A's late release or extend must not touch B's lease.
func checkLateRelease(ctx context.Context, b driver.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	if _, err := acquire(ctx, b, name, a, shortTTL); err != nil {
		return err
	}
	if err := waitFree(ctx, b, name); err != nil {
		return err
	}
	tok, err := acquire(ctx, b, name, c, longTTL)
	if err != nil {
		return err
	}
	return first(
		expectIs("late Release by the expired owner", release(ctx, b, name, a), driver.ErrNotHeld),
		expectIs("late Extend by the expired owner", extend(ctx, b, name, a, longTTL), driver.ErrNotHeld),
		expectHolder(ctx, b, name, c, tok),
	)
}

func checkNamesIndependent(ctx context.Context, b driver.Backend, ns string) error {
	// Names that differ only in case, in a trailing space or in Unicode
	// normalisation (é precomposed and decomposed) are distinct names.
	names := []string{"a", "A", "a:b", "{a}", "}{", "a b", "a ", "замок", "Замок", "caf\u00e9", "cafe\u0301"}
	owners := map[string]string{}
	tokens := map[string]fence.Token{}
	for _, n := range names {
		o := owner()
		tok, err := acquire(ctx, b, ns+n, o, longTTL)
		if err != nil {
			return err
		}
		owners[n], tokens[n] = o, tok
	}
	if err := release(ctx, b, ns+"a", owners["a"]); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	for _, n := range names[1:] {
		if err := expectHolder(ctx, b, ns+n, owners[n], tokens[n]); err != nil {
			return err
		}
	}
	return expectFree(ctx, b, ns+"a")
}

// checkConcurrentAcquirers races many owners for one lock, round after round:
// exactly one must win each round, and tokens must rise between rounds.
func checkConcurrentAcquirers(ctx context.Context, b driver.Backend, ns string) error {
	const rounds, racers = 5, 8
	name := ns + "l"
	var last fence.Token
	for r := 0; r < rounds; r++ {
		type result struct {
			owner string
			token fence.Token
			err   error
		}
		results := make(chan result, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := owner()
				<-start
				tok, err := take(ctx, b, name, o, longTTL)
				results <- result{o, tok, err}
			}()
		}
		close(start)
		wg.Wait()
		close(results)
		var winners []result
		for res := range results {
			switch {
			case res.err == nil:
				winners = append(winners, res)
			case !errors.Is(res.err, driver.ErrHeld):
				return fmt.Errorf("round %d: Acquire: %v; want success or driver.ErrHeld", r+1, res.err)
			}
		}
		if len(winners) != 1 {
			return fmt.Errorf("round %d: %d of %d concurrent acquirers won; want exactly 1", r+1, len(winners), racers)
		}
		w := winners[0]
		if w.token <= last {
			return fmt.Errorf("round %d: token %d after %d; tokens must strictly increase", r+1, w.token, last)
		}
		last = w.token
		if err := expectHolder(ctx, b, name, w.owner, w.token); err != nil {
			return err
		}
		if err := release(ctx, b, name, w.owner); err != nil {
			return fmt.Errorf("round %d: Release by the winner: %w", r+1, err)
		}
	}
	return nil
}
