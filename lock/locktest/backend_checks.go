package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

// BackendChecks returns the checks of the Backend contract.
func BackendChecks() []Check {
	return []Check{
		{"AcquireFreeLock", checkAcquireFree},
		{"InspectFreeLock", checkInspectFree},
		{"MutualExclusion", checkMutualExclusion},
		{"SameOwnerReacquireKeepsToken", checkSameOwnerReacquire},
		{"TokensIncreaseAcrossRelease", checkTokensAcrossRelease},
		{"TokensIncreaseAcrossExpiry", checkTokensAcrossExpiry},
		{"ReleaseFreesLock", checkReleaseFrees},
		{"WrongOwnerReleaseRefused", checkWrongOwnerRelease},
		{"WrongOwnerExtendRefused", checkWrongOwnerExtend},
		{"ExtendProlongsLease", checkExtendProlongs},
		{"ExtendAfterExpiryNeverRecreates", checkExtendAfterExpiry},
		{"LateReleaseLeavesNewHolder", checkLateRelease},
		{"NamesAreIndependent", checkNamesIndependent},
		{"ConcurrentAcquirersOneWinner", checkConcurrentAcquirers},
		{"InvalidInputRefused", checkBackendInvalid},
		{"CancelledContextTakesNothing", checkBackendCancelled},
	}
}

func checkAcquireFree(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return fmt.Errorf("Inspect: %w", err)
	}
	if info.Name != name || !info.Held || info.Owner != a || info.Token != tok {
		return fmt.Errorf("Inspect = %+v; want %q held by %q with token %d", info, name, a, tok)
	}
	if info.TTL <= 0 || info.TTL > longTTL {
		return fmt.Errorf("Inspect TTL = %v; want in (0, %v]", info.TTL, longTTL)
	}
	return nil
}

func checkInspectFree(ctx context.Context, b lock.Backend, ns string) error {
	info, err := b.Inspect(ctx, ns+"never")
	if err != nil {
		return fmt.Errorf("Inspect of a never-used lock: %w", err)
	}
	if info.Held || info.Owner != "" || info.Token != 0 || info.TTL != 0 {
		return fmt.Errorf("Inspect of a never-used lock = %+v; want free with zero owner, token and TTL", info)
	}
	return nil
}

func checkMutualExclusion(ctx context.Context, b lock.Backend, ns string) error {
	name, a, c := ns+"l", owner(), owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	_, err = b.Acquire(ctx, name, c, longTTL)
	if !errors.Is(err, lock.ErrHeld) {
		return fmt.Errorf("Acquire by a second owner while held: %v; want an error matching lock.ErrHeld", err)
	}
	var held *lock.HeldError
	if errors.As(err, &held) && (held.TTL < 0 || held.TTL > longTTL) {
		return fmt.Errorf("HeldError.TTL = %v; want in [0, %v]", held.TTL, longTTL)
	}
	return expectHolder(ctx, b, name, a, tok)
}

func checkSameOwnerReacquire(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, time.Second)
	if err != nil {
		return err
	}
	again, err := b.Acquire(ctx, name, a, longTTL)
	if err != nil {
		return fmt.Errorf("re-Acquire by the holder: %w", err)
	}
	if again != tok {
		return fmt.Errorf("re-Acquire by the holder minted token %d; want the same token %d", again, tok)
	}
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if info.TTL <= time.Second {
		return fmt.Errorf("re-Acquire with a longer TTL left TTL %v; want it extended beyond 1s", info.TTL)
	}
	return expectHolder(ctx, b, name, a, tok)
}

func checkTokensAcrossRelease(ctx context.Context, b lock.Backend, ns string) error {
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
		if err := b.Release(ctx, name, o); err != nil {
			return fmt.Errorf("Release by the holder: %w", err)
		}
	}
	return nil
}

func checkTokensAcrossExpiry(ctx context.Context, b lock.Backend, ns string) error {
	name := ns + "l"
	var last fence.Token
	for i := 0; i < 3; i++ {
		tok, err := acquire(ctx, b, name, owner(), shortTTL)
		if err != nil {
			return err
		}
		if tok <= last {
			return fmt.Errorf("acquisition %d after expiry minted token %d after %d; tokens must strictly increase", i+1, tok, last)
		}
		last = tok
		if err := waitFree(ctx, b, name); err != nil {
			return err
		}
	}
	return nil
}

func checkReleaseFrees(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	if _, err := acquire(ctx, b, name, a, longTTL); err != nil {
		return err
	}
	if err := b.Release(ctx, name, a); err != nil {
		return fmt.Errorf("Release by the holder: %w", err)
	}
	if err := expectFree(ctx, b, name); err != nil {
		return err
	}
	if err := expectIs("second Release", b.Release(ctx, name, a), lock.ErrNotHeld); err != nil {
		return err
	}
	_, err := acquire(ctx, b, name, owner(), longTTL)
	return err
}

func checkWrongOwnerRelease(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	return first(
		expectIs("Release by another owner", b.Release(ctx, name, owner()), lock.ErrNotHeld),
		expectHolder(ctx, b, name, a, tok),
	)
}

func checkWrongOwnerExtend(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, longTTL)
	if err != nil {
		return err
	}
	return first(
		expectIs("Extend by another owner", b.Extend(ctx, name, owner(), longTTL), lock.ErrNotHeld),
		expectHolder(ctx, b, name, a, tok),
		expectIs("Extend of a free lock", b.Extend(ctx, ns+"free", owner(), longTTL), lock.ErrNotHeld),
		expectFree(ctx, b, ns+"free"),
	)
}

func checkExtendProlongs(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	tok, err := acquire(ctx, b, name, a, 200*time.Millisecond)
	if err != nil {
		return err
	}
	if err := b.Extend(ctx, name, a, longTTL); err != nil {
		return fmt.Errorf("Extend by the holder: %w", err)
	}
	info, err := b.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if info.TTL <= time.Second {
		return fmt.Errorf("after Extend to %v the TTL is %v", longTTL, info.TTL)
	}
	return expectHolder(ctx, b, name, a, tok)
}

func checkExtendAfterExpiry(ctx context.Context, b lock.Backend, ns string) error {
	name, a := ns+"l", owner()
	if _, err := acquire(ctx, b, name, a, shortTTL); err != nil {
		return err
	}
	if err := waitFree(ctx, b, name); err != nil {
		return err
	}
	return first(
		expectIs("Extend after expiry", b.Extend(ctx, name, a, longTTL), lock.ErrNotHeld),
		expectFree(ctx, b, name),
		expectIs("Release after expiry", b.Release(ctx, name, a), lock.ErrNotHeld),
	)
}

// checkLateRelease is the article's classic bug: A's lease expires, B takes
// the lock, and A's late release or extend must not touch B's lease.
func checkLateRelease(ctx context.Context, b lock.Backend, ns string) error {
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
		expectIs("late Release by the expired owner", b.Release(ctx, name, a), lock.ErrNotHeld),
		expectIs("late Extend by the expired owner", b.Extend(ctx, name, a, longTTL), lock.ErrNotHeld),
		expectHolder(ctx, b, name, c, tok),
	)
}

func checkNamesIndependent(ctx context.Context, b lock.Backend, ns string) error {
	names := []string{"a", "a:b", "{a}", "}{", "a b", "замок"}
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
	if err := b.Release(ctx, ns+"a", owners["a"]); err != nil {
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
func checkConcurrentAcquirers(ctx context.Context, b lock.Backend, ns string) error {
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
				tok, err := b.Acquire(ctx, name, o, longTTL)
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
			case !errors.Is(res.err, lock.ErrHeld):
				return fmt.Errorf("round %d: Acquire: %v; want success or lock.ErrHeld", r+1, res.err)
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
		if err := b.Release(ctx, name, w.owner); err != nil {
			return fmt.Errorf("round %d: Release by the winner: %w", r+1, err)
		}
	}
	return nil
}

func checkBackendInvalid(ctx context.Context, b lock.Backend, ns string) error {
	name, o := ns+"l", owner()
	cases := []struct {
		op  string
		err func() error
	}{
		{"Acquire with an empty name", func() error { _, err := b.Acquire(ctx, "", o, longTTL); return err }},
		{"Acquire with an empty owner", func() error { _, err := b.Acquire(ctx, name, "", longTTL); return err }},
		{"Acquire with ttl 0", func() error { _, err := b.Acquire(ctx, name, o, 0); return err }},
		{"Acquire with a negative ttl", func() error { _, err := b.Acquire(ctx, name, o, -time.Second); return err }},
		{"Acquire with ttl below 1ms", func() error { _, err := b.Acquire(ctx, name, o, 500*time.Microsecond); return err }},
		{"Acquire with a NUL in the name", func() error { _, err := b.Acquire(ctx, name+"\x00", o, longTTL); return err }},
		{"Extend with ttl 0", func() error { return b.Extend(ctx, name, o, 0) }},
		{"Extend with an empty name", func() error { return b.Extend(ctx, "", o, longTTL) }},
		{"Release with an empty owner", func() error { return b.Release(ctx, name, "") }},
		{"Release with an empty name", func() error { return b.Release(ctx, "", o) }},
		{"Inspect with an empty name", func() error { _, err := b.Inspect(ctx, ""); return err }},
		{"Inspect with a NUL in the name", func() error { _, err := b.Inspect(ctx, name+"\x00"); return err }},
	}
	for _, c := range cases {
		if err := expectIs(c.op, c.err(), fence.ErrInvalid); err != nil {
			return err
		}
	}
	return expectFree(ctx, b, name)
}

func checkBackendCancelled(ctx context.Context, b lock.Backend, ns string) error {
	done, cancel := context.WithCancel(ctx)
	cancel()
	name := ns + "l"
	if _, err := b.Acquire(done, name, owner(), longTTL); err == nil {
		return fmt.Errorf("Acquire with a cancelled context succeeded; want an error")
	}
	return expectFree(ctx, b, name)
}
