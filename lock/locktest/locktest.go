// Package locktest is a conformance suite for lock.Backend implementations,
// and for the lock.Client running over them.
//
// Any implementation runs every check with one call from its own tests:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T) lock.Backend { return mybackend.New(...) })
//	}
//
// and the token-monotonicity check, which drives the backend from many
// goroutines for a second or two, with a second test:
//
//	func TestMonotonic(t *testing.T) {
//		locktest.Monotonic(t, func(t *testing.T) lock.Backend { return mybackend.New(...) })
//	}
//
// Each check is a named subtest. Checks use lock names under a random prefix
// of their own, so a backend shared between checks, runs or processes is
// fine. Checks that need a lease to expire use TTLs of tens to hundreds of
// milliseconds and poll with a deadline; Run takes about two seconds on an
// in-process backend.
//
// Timing checks never depend on the machine being fast: a lease's remaining
// TTL is judged against the call windows measured around the calls (at most
// the TTL minus the time surely gone, at least the TTL minus the time at most
// gone, give or take 5 ms of rounding), so a slow run can only make a check
// less sharp, never fail a correct backend.
//
// What cannot be checked from outside a backend: a context deadline that
// ends while a call waits for its server (the suite checks every method
// with a context already cancelled and one past its deadline; a deadline
// in mid-call needs a delayed network, which the fault kit provides); that
// a lease whose TTL ran out is refused to its old owner at the very instant
// of expiry (the suite checks it after the lease is seen to be free).
//
// An owner value used again after its lease ended (a caller of
// Backend.Acquire that keeps one owner, a holder resuming with a saved
// owner) is checked: after its own release or its lease's expiry, also with
// another holder in between, it must get a new token above every earlier
// one, never its old one back.
//
// A backend that offers queued waiting (lock.QueueBackend) gets the checks of
// that capability from Run as well (RunQueue, QueueChecks): order of
// service, wake-up on release and at the holder's expiry, dead and cancelled
// waiters skipped, idempotent places. They judge wake-ups by a wide margin
// (a woken waiter is served within 5 s, its renewal would come after 10 s).
//
// A backend that offers resuming a lease (lock.Resumer) gets the checks of
// that capability from Run as well (RunResume, ResumeChecks).
//
// The checks are also exported one by one (Checks, MonotonicCheck), so that
// the suite's own tests can show that each one fails on a backend that
// breaks its rule.
package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/fencekit/fencekit/lock"
)

// Check is one obligation of the Backend contract, or of the Client over it.
type Check struct {
	// Name is the subtest's name.
	Name string
	// Run returns nil when backend meets the obligation. Every lock name it
	// uses starts with ns.
	Run func(ctx context.Context, backend lock.Backend, ns string) error
}

// Timeout bounds each check.
const Timeout = 30 * time.Second

// Run runs every check as a subtest of t, and, when the backend implements
// lock.QueueBackend, the checks of that capability (RunQueue); the checks of
// several names at once (RunMulti); and, when the backend implements
// lock.Resumer, the resume checks (RunResume). newBackend is called once per
// check and once more to see which the backend is; it may return the same
// backend each time.
func Run(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	runChecks(t, Checks(), newBackend)
	if _, ok := newBackend(t).(lock.QueueBackend); ok {
		RunQueue(t, newBackend) // the optional capability, when the backend has it
	}
	t.Run("Multi", func(t *testing.T) { RunMulti(t, newBackend) }) // multi_checks.go
	if _, ok := newBackend(t).(lock.Resumer); ok {
		RunResume(t, newBackend) // resume_checks.go
	}
	if _, ok := newBackend(t).(lock.PermitBackend); ok {
		t.Run("Permits", func(t *testing.T) { RunPermits(t, newBackend) }) // permit_checks.go
	}
}

// runChecks runs each of checks as a subtest of t, on a backend of its own
// and in a namespace of its own, bounded by Timeout.
func runChecks(t *testing.T, checks []Check, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.Name, func(t *testing.T) {
			b := newBackend(t)
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			if err := c.Run(ctx, b, Namespace()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Namespace returns a fresh random lock-name prefix.
func Namespace() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "locktest:" + hex.EncodeToString(b[:]) + ":"
}

// Checks returns every check of the suite, in the order Run runs them.
func Checks() []Check {
	return append(BackendChecks(), ClientChecks()...)
}
