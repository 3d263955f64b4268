// Package fencetest is a conformance suite for fence.Store implementations.
//
// Any implementation runs every check with one call from its own tests:
//
//	func TestConformance(t *testing.T) {
//		fencetest.Run(t, func(t *testing.T) fence.Store { return mystore.New(...) })
//	}
//
// Each check is a named subtest, so a failure names the obligation of the
// fence package documentation that the store broke. Checks write only under
// a random key prefix of their own, so a store shared between checks, test
// runs or processes is fine, and nothing has to be cleaned between them.
//
// Linearizable adds one more call: concurrent random Put, Get, Delete and
// Advance calls with overlapping tokens, some interrupted mid-call, whose
// history is checked with porcupine against the fenced register:
//
//	fencetest.Linearizable(t, store, nil)
//
// The checks are also exported one by one (Checks) for tooling, and so that
// the suite's own tests can show that each check fails on a store that breaks
// its rule: they hold a gallery of broken stores, each caught in every run.
// docs/conformance.md lists every check with the obligation it enforces, and
// what no black-box check can prove.
package fencetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Check is one obligation of the Store contract.
type Check struct {
	// Name is the subtest's name.
	Name string
	// Run returns nil when store meets the obligation. Every key it uses
	// starts with ns.
	Run func(ctx context.Context, store fence.Store, ns string) error
}

// Timeout bounds each check.
const Timeout = 30 * time.Second

// Run runs every check as a subtest of t. newStore is called once per check;
// it may return the same store each time.
func Run(t *testing.T, newStore func(t *testing.T) fence.Store) {
	t.Helper()
	for _, c := range Checks() {
		t.Run(c.Name, func(t *testing.T) {
			store := newStore(t)
			ctx, cancel := context.WithTimeout(context.Background(), Timeout)
			defer cancel()
			if err := c.Run(ctx, store, Namespace()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Namespace returns a fresh random key prefix.
func Namespace() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "fencetest:" + hex.EncodeToString(b[:]) + ":"
}
