package drivertest_test

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/lock/driver"
	"github.com/fencekit/fencekit/lock/drivertest"
)

// allChecks is every check Run runs.
func allChecks() []drivertest.Check { return drivertest.Checks() }

// lockChecks is every check but those of permits: the checks that the
// flaws of the flawed backend, which are all in its locks, can fail.
func lockChecks() []drivertest.Check {
	var checks []drivertest.Check
	for _, c := range allChecks() {
		if !strings.HasPrefix(c.Name, "Permits/") {
			checks = append(checks, c)
		}
	}
	return checks
}

// checksNamed returns the checks whose names start with prefix.
func checksNamed(prefix string) []drivertest.Check {
	var checks []drivertest.Check
	for _, c := range allChecks() {
		if strings.HasPrefix(c.Name, prefix) {
			checks = append(checks, c)
		}
	}
	return checks
}

// runCheck runs one check on b under a fresh namespace.
func runCheck(c drivertest.Check, b driver.Backend) error {
	ctx, cancel := context.WithTimeout(context.Background(), drivertest.MonotonicTimeout)
	defer cancel()
	return c.Run(ctx, b, drivertest.Namespace())
}

// failures runs checks on b, concurrently (each under its own namespace),
// at most as many at once as slots holds (nil: no limit), and returns the
// ones that failed.
func failures(b driver.Backend, checks []drivertest.Check, slots chan struct{}) map[string]error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := map[string]error{}
	for _, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if slots != nil {
				slots <- struct{}{}
				defer func() { <-slots }()
			}
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
// own tests fast (t.Parallel would run only GOMAXPROCS at a time). The
// broken backends run every check at once, for a check that fails under
// load fails them no less; the backends that must pass every check
// (mustPass) run a few checks per core at a time, so that a loaded machine
// does not delay a keep-alive past its lease.
func failuresOfAll(backends []driver.Backend, checks []drivertest.Check, mustPass bool) []map[string]error {
	each := make([][]drivertest.Check, len(backends))
	for i := range each {
		each[i] = checks
	}
	return failuresOfEach(backends, each, mustPass)
}

// failuresOfEach is failuresOfAll with checks of its own for each backend:
// backends[i] runs checks[i].
func failuresOfEach(backends []driver.Backend, checks [][]drivertest.Check, mustPass bool) []map[string]error {
	var slots chan struct{}
	if mustPass {
		slots = make(chan struct{}, 4*runtime.GOMAXPROCS(0))
	}
	out := make([]map[string]error, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Add(1)
		go func() { defer wg.Done(); out[i] = failures(b, checks[i], slots) }()
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
	// A set taken one name at a time refuses with the error of the name
	// that was busy: the Client promises a *HeldError naming it.
	{"refuses with a bare ErrHeld, naming no lock", flaws{heldBare: true}, []string{"Multi/InOrder/MultiAllOrNothing", "Multi/Polling/MultiAllOrNothing", "Multi/MultiAllOrNothing"}, false},
	{"refuses with an error that is not ErrHeld", flaws{heldPlainError: true}, []string{"MutualExclusion", "ConcurrentAcquirersOneWinner", "ClientTryAcquireHeld", "OwnersComparedExactly"}, false},
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

// uncheckedInput are backends that accept bad input. The Client checks its
// input before anything is sent (driver.Validate) and the contract lets a
// backend assume valid input, so they are no longer caught: they must pass
// every check of bad input, which shows that the Client sent them none.
var uncheckedInput = []struct {
	bug string
	f   flaws
}{
	{"accepts an empty owner", flaws{acceptEmptyOwner: true}},
	{"accepts a TTL of 0", flaws{acceptZeroTTL: true}},
	{"checks names only for emptiness", flaws{nameEmptyOnly: true}},
	{"does not validate Inspect's name", flaws{inspectNoCheck: true}},
	{"does not validate Release's input", flaws{releaseNoCheck: true}},
	{"checks no input at all", flaws{acceptEmptyOwner: true, acceptZeroTTL: true, nameEmptyOnly: true, inspectNoCheck: true, releaseNoCheck: true}},
}

// inputChecks are the checks of bad input through the Client.
var inputChecks = []string{"InvalidInputRefused", "InvalidMetadataRefused", "ClientInvalidMetadataRefused", "ResumeRefusesBadInput", "Permits/PermitRefusesBadInput", "Multi/MultiRefusesBadSet", "Multi/InOrder/MultiRefusesBadSet"}

func TestBackendsNeedNotCheckInput(t *testing.T) {
	for _, u := range uncheckedInput {
		t.Run(u.bug, func(t *testing.T) {
			t.Parallel()
			for _, name := range inputChecks {
				if err := runCheck(checkNamed(name), newFlawed(u.f)); err != nil {
					t.Errorf("%s failed on a backend that %s, which the Client never sends bad input: %v", name, u.bug, err)
				}
			}
		})
	}
}

func checkNamed(name string) drivertest.Check {
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
	backends := make([]driver.Backend, len(gallery))
	for i, g := range gallery {
		backends[i] = newFlawed(g.f)
	}
	results := failuresOfAll(backends, lockChecks(), false)
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
		backend driver.Backend
	}{
		{"memory", memory.NewBackend()},
		{"a map under a mutex", newFlawed(flaws{})},
		{"one token counter shared by every name", newFlawed(flaws{sharedCounter: true})},
		{"tokens with gaps", newFlawed(flaws{gaps: true})},
		{"every error wrapped", newFlawed(flaws{wrapErrors: true})},
		{"refusals without a TTL", newFlawed(flaws{heldNoTTL: true, wrapErrors: true})},
		{"all of those", newFlawed(flaws{sharedCounter: true, gaps: true, wrapErrors: true, heldNoTTL: true})},
	}
	backends := make([]driver.Backend, len(cases))
	for i, c := range cases {
		backends[i] = c.backend
	}
	results := failuresOfAll(backends, allChecks(), true)
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
	for _, c := range inputChecks {
		if !seen[c] {
			t.Errorf("inputChecks names %s, which is no check", c)
		}
	}
}

func TestMonotonicPassesMemoryBackend(t *testing.T) {
	if err := runCheck(checkNamed("TokensMonotonicUnderContention"), memory.NewBackend()); err != nil {
		t.Fatal(err)
	}
}

func ExampleRun() {
	// In a _test.go file of your backend's package:
	//
	//	func TestConformance(t *testing.T) {
	//		drivertest.Run(t, func(t *testing.T) driver.Backend { return mybackend.New() })
	//	}
	//
	// Run runs every check of Checks, token monotonicity included.
	names := map[string]bool{}
	for _, c := range drivertest.Checks() {
		names[c.Name] = true
	}
	fmt.Println(names["TokensMonotonicUnderContention"], names["QueueServesInArrivalOrder"], names["Multi/InOrder/MultiAllOrNothing"], names["Permits/SemaphoreGrantsAtMostLimit"])
	// Output: true true true true
}
