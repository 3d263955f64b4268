package locktest_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock"
	"github.com/fencekit/fencekit/lock/locktest"
)

// allChecks is every check: the suite's and Monotonic.
func allChecks() []locktest.Check {
	return append(locktest.Checks(), locktest.MonotonicCheck())
}

// runCheck runs one check on b under a fresh namespace.
func runCheck(c locktest.Check, b lock.Backend) error {
	ctx, cancel := context.WithTimeout(context.Background(), locktest.MonotonicTimeout)
	defer cancel()
	return c.Run(ctx, b, locktest.Namespace())
}

// failures runs every check on b, concurrently (each under its own
// namespace), and returns the ones that failed.
func failures(b lock.Backend) map[string]error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := map[string]error{}
	for _, c := range allChecks() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runCheck(c, b); err != nil {
				mu.Lock()
				failed[c.Name] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// failuresOfAll runs failures on every backend at once: the checks mostly
// wait for leases to expire, so running them side by side keeps the suite's
// own tests fast (t.Parallel would run only GOMAXPROCS at a time).
func failuresOfAll(backends []lock.Backend) []map[string]error {
	out := make([]map[string]error, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = failures(b) }()
	}
	wg.Wait()
	return out
}

func names(m map[string]error) []string {
	var s []string
	for n := range m {
		s = append(s, n)
	}
	sort.Strings(s)
	return s
}

// gallery is one realistic bug per backend, and the checks that must catch
// it. A racy bug names the check that catches it by chance each run; the
// test repeats that check until it does, so the gallery never flakes.
var gallery = []struct {
	bug      string
	f        flaws
	mustFail []string
	racy     bool
}{
	{"resets the token counter on release", flaws{resetOnRelease: true}, []string{"TokensIncreaseAcrossRelease", "ConcurrentAcquirersOneWinner", "DoReleasesAfterwards", "TokensMonotonicUnderContention"}, false},
	{"keeps the token counter in the lease, so it expires with it", flaws{resetOnExpiry: true}, []string{"TokensIncreaseAcrossExpiry"}, false},
	{"gives the last token back on release", flaws{releaseLowers: true}, []string{"TokensIncreaseAcrossRelease", "DoReleasesAfterwards"}, false},
	{"mints a waiter's token at its first attempt", flaws{mintWhileWaiting: true}, []string{"TokensMonotonicUnderContention"}, true},
	{"gives an owner its old token back after its own release", flaws{reuseAfterRelease: true}, []string{"ReusedOwnerAfterReleaseGetsNewToken"}, false},
	{"gives an owner its old token back after its lease expired", flaws{reuseAfterExpiry: true}, []string{"ReusedOwnerAfterExpiryGetsNewToken"}, false},
	{"mints a new token on a same-owner re-acquire", flaws{reacquireNewTok: true}, []string{"SameOwnerReacquireKeepsToken"}, false},
	{"does not renew on a same-owner re-acquire", flaws{reacquireNoRenew: true}, []string{"SameOwnerReacquireKeepsToken"}, false},
	{"checks and takes a free lock in two steps", flaws{nonAtomicAcquire: true}, []string{"ConcurrentAcquirersOneWinner"}, true},
	{"adds an extension to the old expiry", flaws{extendAddsToOld: true}, []string{"ExtendSetsTTLFromNow", "ExtendProlongsLease"}, false},
	{"never shortens a lease on Extend", flaws{extendNeverShorts: true}, []string{"ExtendSetsTTLFromNow"}, false},
	{"re-creates an expired lease on Extend", flaws{extendRecreates: true}, []string{"ExtendAfterExpiryNeverRecreates", "WrongOwnerExtendRefused"}, false},
	{"extends without an owner check", flaws{extendAnyOwner: true}, []string{"WrongOwnerExtendRefused", "LateReleaseLeavesNewHolder", "WrongOwnerExtendKeepsTTL", "OwnersComparedExactly"}, false},
	{"moves the holder's expiry on another owner's Extend", flaws{extendOtherMovesTTL: true}, []string{"WrongOwnerExtendKeepsTTL", "OwnersComparedExactly"}, false},
	{"refuses Extend with an error that is not ErrNotHeld", flaws{extendPlainError: true}, []string{"WrongOwnerExtendRefused", "ExtendAfterExpiryNeverRecreates"}, false},
	{"releases without an owner check", flaws{releaseAnyOwner: true}, []string{"WrongOwnerReleaseRefused", "LateReleaseLeavesNewHolder", "OwnersComparedExactly"}, false},
	{"does not really release", flaws{releaseKeepsHeld: true}, []string{"ReleaseFreesLock", "DoReleasesAfterwards", "LeaseTTLAndRelease"}, false},
	{"gives the lock to everyone", flaws{noExclusion: true}, []string{"MutualExclusion", "ConcurrentAcquirersOneWinner", "ClientTryAcquireHeld", "HeldErrorReportsRemainingTTL"}, false},
	{"computes expiry from a clock that ticks every 100ms", flaws{coarseClock: true}, []string{"InspectReportsRemainingTTL|AcquireFreeLock|LeaseLastsItsTTL|ExtendSetsTTLFromNow"}, false},
	{"sends the TTL in whole seconds", flaws{ttlSeconds: true}, []string{"LeaseLastsItsTTL", "SameOwnerReacquireKeepsToken", "ExtendSetsTTLFromNow", "KeepAliveHoldsAcrossTTLs"}, false},
	{"rounds the TTL down to 100ms", flaws{ttlTenths: true}, []string{"LeaseLastsItsTTL|ExtendSetsTTLFromNow|SameOwnerReacquireKeepsToken"}, false},
	{"reports the granted TTL instead of the remaining one", flaws{inspectGrantedTTL: true}, []string{"InspectReportsRemainingTTL"}, false},
	{"shows the last owner and token of a released lock", flaws{inspectFreeStale: true}, []string{"ReleaseFreesLock", "DoReleasesAfterwards"}, false},
	{"reports an expired lease as held", flaws{inspectNoExpiry: true}, []string{"TokensIncreaseAcrossExpiry", "ExtendAfterExpiryNeverRecreates", "LateReleaseLeavesNewHolder"}, false},
	{"reports a negative TTL in HeldError", flaws{heldNegativeTTL: true}, []string{"HeldErrorReportsRemainingTTL"}, false},
	{"reports the holder's granted TTL in HeldError", flaws{heldGrantedTTL: true}, []string{"HeldErrorReportsRemainingTTL"}, false},
	{"refuses with an error that is not ErrHeld", flaws{heldPlainError: true}, []string{"MutualExclusion", "ConcurrentAcquirersOneWinner", "ClientTryAcquireHeld", "OwnersComparedExactly"}, false},
	{"accepts an empty owner", flaws{acceptEmptyOwner: true}, []string{"InvalidInputRefused"}, false},
	{"accepts a TTL of 0", flaws{acceptZeroTTL: true}, []string{"InvalidInputRefused"}, false},
	{"checks names only for emptiness", flaws{nameEmptyOnly: true}, []string{"InvalidInputRefused"}, false},
	{"does not validate Inspect's name", flaws{inspectNoCheck: true}, []string{"InvalidInputRefused"}, false},
	{"does not validate Release's input", flaws{releaseNoCheck: true}, []string{"InvalidInputRefused"}, false},
	{"refuses names longer than 255 bytes", flaws{shortNames: true}, []string{"LongestNameAndOwnerAccepted"}, false},
	{"ignores its context", flaws{ignoreContext: true}, []string{"CancelledContextTakesNothing"}, false},
	{"looks at the context in Acquire only", flaws{ctxAcquireOnly: true}, []string{"CancelledContextTakesNothing"}, false},
	{"compares owners by prefix", flaws{ownerPrefix: true}, []string{"OwnersComparedExactly"}, false},
	{"compares owners case-insensitively", flaws{ownerFold: true}, []string{"OwnersComparedExactly"}, false},
	{"folds the case of names", flaws{nameFold: true}, []string{"NamesAreIndependent"}, false},
	{"trims spaces from names", flaws{nameTrim: true}, []string{"NamesAreIndependent"}, false},
}

// caught reports whether check (or, for "a|b", any of them) failed.
func caught(failed map[string]error, check string) bool {
	for _, c := range strings.Split(check, "|") {
		if _, ok := failed[c]; ok {
			return true
		}
	}
	return false
}

func checkNamed(name string) locktest.Check {
	for _, c := range allChecks() {
		if c.Name == name {
			return c
		}
	}
	panic("no check named " + name)
}

// raceAttempts bounds how often the test repeats the check that catches a
// racy bug: with a catch rate of 99% per run, 20 runs miss once in 10^40.
const raceAttempts = 20

func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if len(gallery) < 25 {
		t.Fatalf("the gallery has %d broken backends; it must keep at least 25", len(gallery))
	}
	backends := make([]lock.Backend, len(gallery))
	for i, g := range gallery {
		backends[i] = newFlawed(g.f)
	}
	results := failuresOfAll(backends)
	for i, g := range gallery {
		t.Run(g.bug, func(t *testing.T) {
			failed := results[i]
			for _, check := range g.mustFail {
				for i := 1; !caught(failed, check) && g.racy && i < raceAttempts; i++ {
					if err := runCheck(checkNamed(check), newFlawed(g.f)); err != nil {
						failed[check] = err
					}
				}
				if !caught(failed, check) {
					t.Errorf("check %s passed on a backend that %s", check, g.bug)
				}
			}
			if len(failed) == 0 {
				t.Fatalf("every check passed on a backend that %s", g.bug)
			}
			t.Logf("caught by %v", names(failed))
		})
	}
}

// Legal but unusual backends pass every check.
func TestSuitePassesUnusualBackends(t *testing.T) {
	cases := []struct {
		name    string
		backend lock.Backend
	}{
		{"memory", memory.NewBackend()},
		{"a map under a mutex", newFlawed(flaws{})},
		{"one token counter shared by every name", newFlawed(flaws{sharedCounter: true})},
		{"tokens with gaps", newFlawed(flaws{gaps: true})},
		{"every error wrapped", newFlawed(flaws{wrapErrors: true})},
		{"refusals without a TTL", newFlawed(flaws{heldNoTTL: true, wrapErrors: true})},
		{"all of those", newFlawed(flaws{sharedCounter: true, gaps: true, wrapErrors: true, heldNoTTL: true})},
	}
	backends := make([]lock.Backend, len(cases))
	for i, c := range cases {
		backends[i] = c.backend
	}
	results := failuresOfAll(backends)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if failed := results[i]; len(failed) > 0 {
				for _, n := range names(failed) {
					t.Errorf("%s: %v", n, failed[n])
				}
			}
		})
	}
}

func TestChecksHaveUniqueNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range allChecks() {
		if seen[c.Name] {
			t.Errorf("two checks are named %s", c.Name)
		}
		seen[c.Name] = true
	}
	for _, g := range gallery {
		for _, check := range g.mustFail {
			for _, c := range strings.Split(check, "|") {
				if !seen[c] {
					t.Errorf("the gallery names %s, which is no check", c)
				}
			}
		}
	}
}

func TestMonotonicPassesMemoryBackend(t *testing.T) {
	locktest.Monotonic(t, func(*testing.T) lock.Backend { return memory.NewBackend() })
}

func ExampleRun() {
	// In a _test.go file of your backend's package:
	//
	//	func TestConformance(t *testing.T) {
	//		locktest.Run(t, func(t *testing.T) lock.Backend { return mybackend.New() })
	//	}
	//	func TestMonotonic(t *testing.T) {
	//		locktest.Monotonic(t, func(t *testing.T) lock.Backend { return mybackend.New() })
	//	}
	fmt.Println(len(locktest.Checks()) == len(locktest.BackendChecks())+len(locktest.ClientChecks()))
	// Output: true
}
