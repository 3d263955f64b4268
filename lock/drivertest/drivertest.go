// Package drivertest is the conformance suite of the driver contract
// (lock/driver): it checks a driver.Backend against every obligation of
// that contract, and the lock.Client running over it.
//
// # One call
//
// A backend runs every check with one call from its own tests:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) driver.Backend { return mybackend.New(...) })
//	}
//
// There is nothing else to remember: Run checks every shape (locks, queued
// waiting, sets, resume, semaphores, read-write locks), holder metadata and
// token monotonicity. A backend whose server keeps TTLs in a coarse unit
// says so with an option (see Timing):
//
//	drivertest.Run(t, newBackend, drivertest.TTLGranularity(time.Second))
//
// The election checks, which also need a fence.Store, are RunElection; the
// network fault kit, which needs a server address and a dial function, is
// RunFaults. Their TTLs and bounds hold as they are on a backend with a
// coarse TTL granularity, so neither takes options.
//
// # The obligations Run checks
//
//   - Locks: Acquire takes a free or expired lock with a token above every
//     token ever issued for the name (across release, expiry and owners that
//     come back), refuses another owner with ErrHeld (a *driver.HeldError
//     with the holder's remaining TTL, or 0) and changes nothing, and renews
//     a same-owner acquire with the same token; Extend renews only a live
//     lease of its owner and never re-creates one; Release is
//     compare-and-delete; a lease lasts its whole TTL and not much longer;
//     names and owners are compared byte for byte; every method honours a
//     context that has ended; Inspect reports the holder, its token, its
//     remaining TTL, its metadata and the number of waiters in line.
//   - The Client over the backend: TryAcquire, Acquire bounded by its
//     context and its attempts, keep-alive across several TTLs, loss
//     detection, Do and its release.
//   - Bad input goes through the Client, which refuses it with ErrInvalid
//     before anything is sent: the backend sees no call at all (a backend
//     may assume valid input, see the driver package).
//   - Holder metadata: what Request.Metadata carries is what Inspect
//     reports, byte for byte, for exactly as long as the lease lives.
//   - Queued waiting (Request.Place): order of service, wake-up on release
//     and at the holder's expiry, dead and cancelled waiters skipped,
//     Leave (of its owner's place only: no other place, no lease), an early
//     wake-up kept, one place per owner kept where it stands when renewed,
//     Await honouring its context.
//   - Sets (Request.Names): all or nothing in one step (a refused set
//     changes nothing, not even a lease its owner held before, and no
//     bystander sees a part of it), the tokens in the caller's order, a
//     same-owner retry that keeps them and renews every lease; or
//     driver.ErrNotAtomic with nothing changed; the Client's checks of sets
//     run over the backend as it is, and again over a wrapper that answers
//     ErrNotAtomic for every set ("Multi/InOrder/", "Multi/Polling/"), so
//     that the Client's one-by-one path is checked on every backend too.
//   - Resume (Request.Resume): the live lease's token, renewed, its
//     metadata kept, in one step (the token returned is the renewed
//     lease's, even when its owner takes the lock anew meanwhile);
//     ErrNotHeld and nothing changed otherwise.
//   - Permits (Kind Semaphore, Read, Write): at most Limit holders, shapes
//     that do not mix (ErrShapeMismatch), order of service, places kept
//     where they stand when renewed and dropped when not, nobody jumping
//     the line, Extend renewing only a live permit, a Release or Extend
//     answered ErrNotHeld changing nothing (no slot freed, nothing
//     revived), Leave of the owner's own place only, an early wake-up kept,
//     readers sharing and writers excluding, a waiting writer not starved,
//     every reader woken by a writer's release, PriorWriter (a retry's
//     too) and LastWriter, tokens rising across kinds, permits apart from
//     locks.
//   - Tokens under contention: the history of many goroutines' calls is
//     checked for linearizability against the token model
//     (TokensMonotonicUnderContention).
//
// Each check is a named subtest. Checks use names under a random prefix of
// their own, so a backend shared between checks, runs or processes is fine.
// Checks that need a lease to expire use TTLs of tens to hundreds of
// milliseconds and poll with a deadline. Queue and permit checks judge
// wake-ups by a wide margin (a woken waiter is served within 5 s, its
// renewal would come after 10 s), but for QueueWakesBeforeRenewal,
// Permits/PermitWakesBeforeRenewal and Permits/RWWriterReleaseWakesAllReaders,
// which want a waiter served within 1 s of the release (or Leave) that lets
// it in, its renewal 3 s away.
//
// # Gaps
//
// A third-party backend that truly cannot serve a shape answers
// driver.ErrUnsupported for it (see the driver package). Every check in
// which the backend answered so is reported as a gap of that shape: it is
// skipped, never passed, with
//
//	gap: <shape>: the backend answers driver.ErrUnsupported
//
// and Run logs the list of gaps, check by check, at the end. The backends
// shipped with fencekit have none.
//
// # Timing
//
// Timing checks never depend on the machine being fast: a lease's remaining
// TTL is judged against the call windows measured around the calls (at most
// the TTL minus the time surely gone, at least the TTL minus the time at most
// gone, give or take 5 ms of rounding), so a slow run can only make a check
// less sharp, never fail a correct backend. A backend whose server keeps TTLs
// in a coarse unit declares it to Run (TTLGranularity): the suite is told,
// it does not ask the backend, so a wrapper around the backend changes
// nothing.
//
// What cannot be checked from outside a backend: a context deadline that
// ends while a call waits for its server (the suite checks every method
// with a context already cancelled and one past its deadline; a deadline
// in mid-call needs a delayed network, which the fault kit provides); that
// a lease whose TTL ran out is refused to its old owner at the very instant
// of expiry (the suite checks it after the lease is seen to be free).
//
// The checks are also exported one by one (Checks), so that the suite's
// own tests can show that each one fails on a backend that breaks its rule
// (mutants_test.go and the *_flawed_test.go files: each bug written over
// the memory backend, with a control that shows it misbehave).
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock/driver"
)

// Check is one obligation of the driver contract, or of the Client over a
// backend.
type Check struct {
	// Name is the subtest's name. A name with slashes ("Multi/InOrder/x")
	// runs as a subtest nested that deep.
	Name string
	// Run returns nil when backend meets the obligation. Every name it
	// uses starts with ns.
	Run func(ctx context.Context, backend driver.Backend, ns string) error
}

// Timeout bounds each check but TokensMonotonicUnderContention, which
// MonotonicTimeout bounds.
const Timeout = 30 * time.Second

// Run runs every check (Checks) as a subtest of t, on a backend from
// newBackend each, which is called once per check and may return the same
// backend each time. A check in which the backend answered
// driver.ErrUnsupported is skipped as a gap, and Run logs the gaps at the
// end (see the package doc). opts declare what the suite cannot learn by
// calling the backend (TTLGranularity); a backend that needs none passes
// none.
func Run(t *testing.T, newBackend func(t *testing.T) driver.Backend, opts ...Option) {
	t.Helper()
	logGaps(t, runChecks(t, Checks(opts...), newBackend))
}

// runChecks runs each of checks as a subtest of t, on a backend of its own
// (watched for gaps) and in a namespace of its own, bounded by its timeout.
// It returns the gaps: the subtests that were skipped because the backend
// answered driver.ErrUnsupported.
func runChecks(t *testing.T, checks []Check, newBackend func(t *testing.T) driver.Backend) []gap {
	t.Helper()
	var gaps []gap
	for _, c := range checks {
		t.Run(c.Name, func(t *testing.T) {
			b := watch(newBackend(t))
			t.Cleanup(func() {
				if shape := b.refused(); shape != "" && t.Skipped() {
					gaps = append(gaps, gap{check: c.Name, shape: shape})
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), timeoutOf(c))
			defer cancel()
			err := c.Run(ctx, b, Namespace())
			if shape := b.refused(); shape != "" {
				t.Skipf("gap: %s: the backend answers driver.ErrUnsupported", shape)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	return gaps
}

// timeoutOf is how long c may run.
func timeoutOf(c Check) time.Duration {
	if c.Name == monotonicName {
		return MonotonicTimeout
	}
	return Timeout
}

// Namespace returns a fresh random name prefix.
func Namespace() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "drivertest:" + hex.EncodeToString(b[:]) + ":"
}

// Checks returns every check of the suite, in the order Run runs them,
// each judging the backend it runs on by opts, as Run(t, newBackend,
// opts...) does.
func Checks(opts ...Option) []Check {
	cfg := newConfig(opts)
	var all []Check
	for _, group := range [][]Check{
		backendChecks(), clientChecks(), metadataChecks(), queueChecks(),
		multiChecks(), resumeChecks(), permitChecks(), {monotonicCheck()},
	} {
		for _, c := range group {
			all = append(all, cfg.bind(c))
		}
	}
	return all
}
