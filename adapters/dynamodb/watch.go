package dynamodb

import (
	"sync"
	"time"
)

// A Backend never reads an expiry from the item: the item holds each
// entry's TTL as a duration and the revision that last renewed it (Ver).
// Whether an entry has run out is judged, as the AWS DynamoDB lock client
// judges a lease, by how long this Backend has itself watched the same
// entry unchanged: the first time it sees an entry (owner, Ver) it notes
// the moment on its own monotonic clock, and the entry has run out once
// its TTL has passed since. Only this machine's clock measures, and only
// durations; no clock is compared with another machine's.
//
// The moment noted is when the reply that showed the entry arrived, which
// is after the entry was written, so the holder's own lease (whose TTL its
// Client counts from the moment it sent its request, before the write)
// has run out by the time this Backend lets another owner in. An entry
// this Backend wrote itself is noted when the write's reply arrives.
//
// A Backend that starts, or looks at a name for the first time, sees every
// entry as new: it waits a whole TTL before it takes over, even from a
// lease that ran out long ago. That is the price of not trusting clocks.
type watch struct {
	mu   sync.Mutex
	seen map[string]map[watchKey]time.Time // per item key
}

type watchKey struct {
	owner string
	ver   int64
	line  bool
}

// note records the entries of one read of the item key (taken at at, the
// moment its reply arrived) and forgets the entries of key it no longer
// holds. It returns the ages of the entries read, as of at.
func (w *watch) note(key string, s *state, at time.Time) ages {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen = map[string]map[watchKey]time.Time{}
	}
	old := w.seen[key]
	now := make(map[watchKey]time.Time, len(s.Holders)+len(s.Line))
	for _, set := range []struct {
		entries []entry
		line    bool
	}{{s.Holders, false}, {s.Line, true}} {
		for _, e := range set.entries {
			k := watchKey{owner: e.Owner, ver: e.Ver, line: set.line}
			if t, ok := old[k]; ok {
				now[k] = t
			} else {
				now[k] = at
			}
		}
	}
	if len(now) == 0 {
		delete(w.seen, key)
	} else {
		w.seen[key] = now
	}
	return agesAt{first: now, at: at}
}

// agesAt answers ages from the moments entries were first seen.
type agesAt struct {
	first map[watchKey]time.Time
	at    time.Time
}

func (a agesAt) age(e entry, line bool) time.Duration {
	t, ok := a.first[watchKey{owner: e.Owner, ver: e.Ver, line: line}]
	if !ok {
		return 0
	}
	return a.at.Sub(t)
}
