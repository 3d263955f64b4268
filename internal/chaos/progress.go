package chaos

import (
	"fmt"
	"slices"
	"time"
)

// progress fills in how the workers progressed: how many leases (or sets)
// the least served worker was handed, how many were handed none, and the
// longest time in which no worker was handed any, from the first one handed
// out to end (when workers stopped starting cycles). held lists, per worker,
// when each of its leases or sets was handed to it.
//
// A lock that deadlocks (two callers each holding a name the other waits
// for, forever) stops every worker whose set meets theirs: the run then goes
// without any acquisition until its end. The faults alone stop it for a few
// TTLs at most (a delayed network makes every reply arrive too late to use
// for as long as the delay lasts), well under limit. The time before the
// first acquisition is left out: it includes the clients' first connections,
// through the proxy's faults.
func (rep *Report) progress(held [][]int64, end int64, limit time.Duration) {
	rep.StallLimit = limit
	var all []int64
	for i, h := range held {
		if i == 0 || len(h) < rep.FewestPerWorker {
			rep.FewestPerWorker = len(h)
		}
		if len(h) == 0 {
			rep.Starved++
		}
		all = append(all, h...)
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	prev := all[0]
	for _, t := range append(all[1:], end) {
		t = min(t, end) // handed out after the end: the cycle began before it
		if d := time.Duration(t - prev); d > rep.LongestStall {
			rep.LongestStall, rep.StallAt = d, time.Duration(prev)
		}
		prev = max(prev, t)
	}
}

// progressViolations are progress's findings that count as violations: in
// set mode, where the library's promise of no deadlock is under test, a run
// in which no set was acquired at all, or a stall longer than the limit. A
// worker that was never served is a figure, not a violation: AcquireMulti
// is free of deadlock, not of starvation (a caller that waited its turn for
// one name lets it go when another is busy), and a short run under faults
// may leave one worker out. A one-name run reports the figures only (its
// runs with server kills may stall for as long as a restart takes).
func (rep *Report) progressViolations() []string {
	if !rep.Sets {
		return nil
	}
	var v []string
	if rep.Acquisitions == 0 {
		v = append(v, "no set was acquired: no progress")
	}
	if rep.LongestStall > rep.StallLimit {
		v = append(v, fmt.Sprintf("no set acquired by any worker for %v from %v into the run (limit %v): no progress",
			rep.LongestStall.Round(time.Millisecond), rep.StallAt.Round(time.Millisecond), rep.StallLimit))
	}
	return v
}
