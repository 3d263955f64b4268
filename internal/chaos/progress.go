package chaos

import (
	"fmt"
	"slices"
	"time"
)

// progress fills in how the workers progressed: how many leases (or sets)
// the least served worker was handed, how many were handed none, the
// longest time in which no worker was handed any (from the first one handed
// out: the time before includes the clients' first connections), and the
// time from the last one handed out to end (when workers stopped starting
// cycles). held lists, per worker, when each of its leases or sets was
// handed to it.
//
// A lock that deadlocks (two callers each holding a name the other waits
// for, their leases kept alive) stops every worker whose set meets theirs,
// for good: the run then goes without any acquisition until its end, and
// the final stall grows with the run. Faults and load stop it too, for a
// few TTLs under the proxy's faults and for seconds on a machine at load
// 30, but it then resumes: a stall in the middle of a run is a figure, a
// final stall above the limit (or a run without any acquisition) is a
// violation.
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
	rep.FinalStall = time.Duration(max(end-all[len(all)-1], 0))
}

// progressViolations are progress's findings that count as violations: in
// set mode, where the library's promise of no deadlock is under test, a run
// in which no set was acquired at all, or one whose workers stopped
// acquiring sets for longer than the limit before it ended. A worker that
// was never served is a figure, not a violation: AcquireMulti is free of
// deadlock, not of starvation (a caller that waited its turn for one name
// lets it go when another is busy), and a short run under faults may leave
// one worker out. A one-name run reports the figures only (its runs with
// server kills may stall for as long as a restart takes).
func (rep *Report) progressViolations() []string {
	if !rep.Sets {
		return nil
	}
	var v []string
	if rep.Acquisitions == 0 {
		v = append(v, "no set was acquired: no progress")
	}
	if rep.FinalStall > rep.StallLimit {
		v = append(v, fmt.Sprintf("no set acquired by any worker in the last %v of the run (limit %v): no progress",
			rep.FinalStall.Round(time.Millisecond), rep.StallLimit))
	}
	return v
}
