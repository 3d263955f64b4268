package chaos

import (
	"fmt"
	"slices"
	"time"
)

// held is the time in which an acquisition certainly held its lock on the
// server: from when its call returned (the grant happened by then) until
// the earliest moment its lease could have ended.
type held struct {
	acq        Op
	start, end int64
}

// liveHolders counts acquisitions of one lock that certainly held it at the
// same time as an acquisition by another owner: two live holders of one
// name, which a lock exists to prevent and fencing does not need (a paused
// holder whose lease expired is not live). ops are one lock's Acquire and
// Release operations.
//
// An acquisition certainly holds its lock from its Return (the server
// granted it during the call) until the earliest of: its Call plus the TTL
// less a twentieth (the server's lease began no earlier than the call; the
// margin covers the servers' clock granularity), and the call of any
// release by the same owner that may have landed after the grant (a release
// may take effect from its call until ambiguity after its return, whatever
// its caller learned). Everything else (a lost reply, a delayed one, an
// extension) can only make a lease last longer than this, never shorter, so
// an overlap of two such intervals is a real violation, and a sound lock
// never shows one whatever the faults.
func liveHolders(ops []Op, ttl, ambiguity time.Duration) (n int, first string) {
	releases := map[string][]Op{}
	for _, o := range ops {
		if o.Kind == Release {
			releases[o.Owner] = append(releases[o.Owner], o)
		}
	}
	var hs []held
	for _, a := range ops {
		if a.Kind != Acquire {
			continue
		}
		end := a.Call + int64(ttl-ttl/20)
		for _, rel := range releases[a.Owner] {
			if rel.Return+int64(ambiguity) >= a.Call {
				end = min(end, max(rel.Call, a.Call))
			}
		}
		if a.Return < end {
			hs = append(hs, held{acq: a, start: a.Return, end: end})
		}
	}
	slices.SortFunc(hs, func(a, b held) int { return cmp64(a.start, b.start) })
	var live []held // intervals begun so far that may still cover the next start
	for _, h := range hs {
		kept := live[:0]
		var other *held
		for _, l := range live {
			if l.end <= h.start {
				continue // ended before h began: it can cover no later start either
			}
			kept = append(kept, l)
			if l.acq.Owner != h.acq.Owner && other == nil {
				other = &l
			}
		}
		if other != nil {
			if n == 0 {
				first = fmt.Sprintf("%v, while %v still held it (until %d at the earliest)", h.acq, other.acq, other.end)
			}
			n++
		}
		live = append(kept, h)
	}
	return n, first
}
