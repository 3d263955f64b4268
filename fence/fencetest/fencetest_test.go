package fencetest_test

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/fencekit/fencekit/adapters/memory"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/fence/fencetest"
)

// racyRuns is how many times TestGallery repeats the checks that catch a
// racy store: each repetition must catch it. Run with -racyruns=1 and
// -count=100 to measure the catch rate of a single run.
var racyRuns = flag.Int("racyruns", 10, "repetitions of the racy checks per gallery store")

// failures runs every check against s and returns the names that failed.
func failures(t *testing.T, s fence.Store) map[string]error {
	t.Helper()
	failed := map[string]error{}
	for _, c := range fencetest.Checks() {
		if err := c.Run(context.Background(), s, fencetest.Namespace()); err != nil {
			failed[c.Name] = err
		}
	}
	return failed
}

// TestGallery shows that every broken store of the gallery is caught, in
// every run, by the checks it names.
func TestGallery(t *testing.T) {
	checks := map[string]fencetest.Check{}
	for _, c := range fencetest.Checks() {
		checks[c.Name] = c
	}
	g := gallery()
	if len(g) < 40 {
		t.Errorf("the gallery has %d broken stores; want at least 40", len(g))
	}
	for _, b := range g {
		t.Run(b.name, func(t *testing.T) {
			runs := 1
			if b.racy {
				runs = *racyRuns
			}
			for range runs {
				for _, name := range b.caughtBy {
					c, ok := checks[name]
					if !ok {
						t.Fatalf("no check named %s", name)
					}
					err := c.Run(context.Background(), b.store(), fencetest.Namespace())
					if err == nil {
						t.Errorf("check %s passed on a store that %s", name, b.name)
					} else if testing.Verbose() {
						t.Logf("%s: %v", name, err)
					}
				}
			}
		})
	}
}

// TestGalleryNamesAreUnique keeps -run TestGallery/<name> unambiguous.
func TestGalleryNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range gallery() {
		if seen[b.name] || len(b.caughtBy) == 0 {
			t.Errorf("gallery store %q is duplicated or names no check", b.name)
		}
		seen[b.name] = true
	}
}

// TestLegalStoresPass shows that correct but unusual stores pass every
// check and the linearizability check.
func TestLegalStoresPass(t *testing.T) {
	for _, l := range legal() {
		t.Run(l.name, func(t *testing.T) {
			if failed := failures(t, l.store()); len(failed) > 0 {
				t.Fatalf("checks failed on a correct store (%s): %v", l.name, failed)
			}
			fencetest.Linearizable(t, l.store(), nil)
		})
	}
}

func TestSuitePassesMemoryStore(t *testing.T) {
	if failed := failures(t, memory.NewStore()); len(failed) > 0 {
		t.Fatalf("checks failed on the memory store: %v", failed)
	}
}

func TestChecksHaveUniqueNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range fencetest.Checks() {
		if seen[c.Name] || c.Name == "" || c.Run == nil {
			t.Errorf("check %q is duplicated, unnamed or empty", c.Name)
		}
		seen[c.Name] = true
	}
	if len(seen) < 30 {
		t.Errorf("only %d checks", len(seen))
	}
}

func ExampleRun() {
	// In a _test.go file of your store's package:
	//
	//	func TestConformance(t *testing.T) {
	//		fencetest.Run(t, func(t *testing.T) fence.Store { return mystore.New() })
	//	}
	for _, c := range fencetest.Checks()[:3] {
		fmt.Println(c.Name)
	}
	// Output:
	// PutThenGet
	// HigherTokenAccepted
	// EqualTokenAccepted
}
