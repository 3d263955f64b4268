package pgqueue

import (
	"testing"
)

// TestUnqueuedBackoff: a waiter that never fell back does not poll; one
// that did backs off with jitter below a ceiling that doubles from
// UnqueuedMinBackoff with each refusal up to UnqueuedMaxBackoff; Forget
// ends it.
func TestUnqueuedBackoff(t *testing.T) {
	var u Unqueued
	if _, ok := u.Backoff("k"); ok {
		t.Fatal("Backoff of a waiter that never fell back: polling")
	}
	for n := 1; n <= 20; n++ {
		u.Refused("k")
		ceiling := min(UnqueuedMinBackoff<<(n-1), UnqueuedMaxBackoff)
		for range 50 {
			d, ok := u.Backoff("k")
			if !ok || d <= 0 || d > ceiling {
				t.Fatalf("after %d refusals: Backoff = %v, %v; want polling, in (0, %v]", n, d, ok, ceiling)
			}
		}
	}
	u.Forget("k")
	if _, ok := u.Backoff("k"); ok {
		t.Fatal("Backoff after Forget: polling")
	}
}
