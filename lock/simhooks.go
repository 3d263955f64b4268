package lock

import mrand "math/rand/v2"

// Seams for the deterministic simulation of this package (sim_test.go and
// its companions). Each is nil or false in every program: only _test.go files
// of this package set them, before any goroutine reads them. They exist
// because a synctest bubble fakes the clock but not the two other sources of
// a schedule: random numbers and the moment a paused process's timer runs.
var (
	// jitterHook, when set, draws Acquire's backoff jitter in [0, n) for c
	// instead of math/rand/v2, so that a seed replays its schedule.
	jitterHook func(c *Client, n int64) int64

	// timerHook, when set, runs in the deadline timer's goroutine before it
	// looks at the deadline. The simulation holds the timer of a paused
	// process there until the process runs again, as a real pause would.
	timerHook func(l *Lease)
)

// brokenVariants are the switches of deliberately broken variants of the
// client, so that a test can show that the simulation catches each of them
// (simvariants_test.go). They work only in a build tagged fencekit_broken
// (broken_on.go), which no program is built with: everywhere else
// brokenBuild is the constant false (broken_off.go), and the code reads
// every switch as brokenBuild && broken.x, so the compiler drops each check
// and the broken code behind it.
type brokenVariants struct {
	deadlineAfterReply  bool // Extend takes the deadline's start after the reply
	shorterExtendLater  bool // a shorter Extend moves the deadline in only when answered
	lateExtendAccepted  bool // Extend accepts a reply that came after the local deadline
	keepAliveNeverLoses bool // neither a renewal nor the deadline ever marks the lease lost
	doKeepsLockOnPanic  bool // Do does not release when its function panics
	leadKeepsLostTerm   bool // Lead's fn keeps its context after the term was lost
}

// jitter draws Acquire's backoff jitter in [0, n).
func jitter(c *Client, n int64) int64 {
	if jitterHook != nil {
		return jitterHook(c, n)
	}
	return mrand.Int64N(n)
}
