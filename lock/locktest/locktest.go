// Package locktest is a conformance suite for lock.Backend implementations,
// and for the lock.Client running over them.
//
// Any implementation runs every check with one call from its own tests:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t *testing.T) lock.Backend { return mybackend.New(...) })
//	}
//
// Each check is a named subtest. Checks use lock names under a random prefix
// of their own, so a backend shared between checks, runs or processes is
// fine. Checks that need a lease to expire use TTLs of tens of milliseconds
// and poll with a deadline; they take about a second in all.
//
// The checks are also exported one by one (Checks), so that the suite's own
// tests can show that each one fails on a backend that breaks its rule.
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

// Run runs every check as a subtest of t. newBackend is called once per
// check; it may return the same backend each time.
func Run(t *testing.T, newBackend func(t *testing.T) lock.Backend) {
	t.Helper()
	for _, c := range Checks() {
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
