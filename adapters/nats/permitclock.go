package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clockMaxAge is how long a Backend uses one sample of the server's clock
// (clockSample) to set the expiry of a permit or a place; past it, the next
// call that sets one samples again (one stream info request, sent together
// with the call's read when it has one).
const clockMaxAge = 5 * time.Second

// clockDrift bounds how much faster or slower this machine's clock may run
// than the server's, as a fraction: 500 ppm, the fastest rate at which an
// NTP daemon slews a clock. Every bound a sample gives widens by it.
const clockDrift = 500e-6

// A permit name's expiries cannot be per-key TTLs (its whole state is one
// key), so they are times on the clock of the stream's leader, the clock
// that stamps every message and expires every lease, and every call bounds
// that clock from a sample: the leader's time in a reply to a stream info
// request, taken between the moments this machine sent the request and got
// the reply. With equal clock rates, the leader's clock at a later moment t
// of this machine lies between server+(t−got) and server+(t−sent), widened
// by clockDrift. A permit is dropped only when its expiry is at or below
// the lower bound (it has certainly passed on the leader), and a new
// expiry is the upper bound plus the TTL (it is at least the TTL from the
// moment the caller sent its request), so this machine's clock never
// decides an expiry, only measures time since the sample.
type clockSample struct {
	server    int64     // the leader's clock in the reply, Unix nanoseconds
	sent, got time.Time // this machine's clock, monotonic readings
}

// serverTime bounds the leader's clock at one moment: lo ≤ it ≤ hi.
type serverTime struct{ lo, hi int64 }

func (s clockSample) at(t time.Time) serverTime {
	slack := int64(float64(t.Sub(s.sent)) * clockDrift)
	return serverTime{lo: s.server + int64(t.Sub(s.got)) - slack, hi: s.server + int64(t.Sub(s.sent)) + slack}
}

// serverClock is a Backend's latest clock sample.
type serverClock struct {
	mu sync.Mutex
	s  clockSample
	ok bool
}

// fresh bounds the server's clock at t from a sample younger than
// clockMaxAge.
func (c *serverClock) fresh(t time.Time) (serverTime, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || t.Sub(c.s.sent) >= clockMaxAge {
		return serverTime{}, false
	}
	return c.s.at(t), true
}

// lower is a lower bound of the server's clock at t from any sample (an
// old one gives a looser bound, never a wrong one), 0 when there is none.
func (c *serverClock) lower(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return 0
	}
	return c.s.at(t).lo
}

// put keeps s, unless the sample kept gives the narrower bounds now.
func (c *serverClock) put(s clockSample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.ok && now.Sub(c.s.sent) < clockMaxAge {
		old, cur := c.s.at(now), s.at(now)
		if old.hi-old.lo < cur.hi-cur.lo && old.lo <= cur.hi && cur.lo <= old.hi {
			return
		}
	}
	c.s, c.ok = s, true
}

// sampleClock asks the stream's leader for its clock (leaderInfo).
func (b *Backend) sampleClock(ctx context.Context) (clockSample, error) {
	_, s, err := b.leaderInfo(ctx, "")
	return s, err
}

// streamInfo is what a Backend reads of a stream info reply.
type streamInfo struct {
	Error     *jetstream.APIError `json:"error,omitempty"`
	TimeStamp time.Time           `json:"ts"`
	State     struct {
		LastSeq uint64 `json:"last_seq"`
		// Subjects counts the messages of each subject that the
		// request's filter matched.
		Subjects map[string]uint64 `json:"subjects"`
	} `json:"state"`
}

// leaderInfo sends a stream info request, which only the leader of a
// replicated stream answers: its reply carries the leader's clock ("ts"),
// kept as the Backend's clock sample and returned, its last revision, and,
// when filter is not empty, the number of messages of each subject that
// filter matches.
func (b *Backend) leaderInfo(ctx context.Context, filter string) (streamInfo, clockSample, error) {
	var req []byte
	if filter != "" {
		req, _ = json.Marshal(struct {
			SubjectsFilter string `json:"subjects_filter"`
		}{filter})
	}
	ctx, cancel := b.b.withTimeout(ctx)
	defer cancel()
	nc := b.b.js.Conn()
	var msg *natsgo.Msg
	sent := time.Now()
	err := untilConnLost(ctx, nc, b.b.elections.next(), func(ctx context.Context) (err error) {
		msg, err = nc.RequestWithContext(ctx, b.b.api+"STREAM.INFO."+b.b.stream, req)
		return err
	})
	got := time.Now()
	if err = noReply(ctx, err); err != nil {
		return streamInfo{}, clockSample{}, err
	}
	var resp streamInfo
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return streamInfo{}, clockSample{}, fmt.Errorf("decode the reply to a stream info request: %w", err)
	}
	if resp.Error != nil {
		return streamInfo{}, clockSample{}, resp.Error
	}
	if resp.TimeStamp.IsZero() {
		return streamInfo{}, clockSample{}, fmt.Errorf("the server reports no time in its stream info")
	}
	s := clockSample{server: resp.TimeStamp.UnixNano(), sent: sent, got: got}
	b.clock.put(s)
	return resp, s, nil
}

// permitNow bounds the server's clock now for a call that may set an
// expiry: from the Backend's sample when it is fresh, and otherwise from a
// new one. floor is the server's time of a message the call read (a lower
// bound: the message was stored before now), 0 when none; a floor above the
// sample's upper bound shows the sample wrong (the leader changed, or its
// clock stepped), and the clock is sampled again.
func (b *Backend) permitNow(ctx context.Context, floor int64) (serverTime, error) {
	now, ok := b.clock.fresh(time.Now())
	if !ok || floor > now.hi {
		s, err := b.sampleClock(ctx)
		if err != nil {
			return serverTime{}, err
		}
		now = s.at(time.Now())
	}
	now.lo = max(now.lo, floor)
	now.hi = max(now.hi, now.lo)
	return now, nil
}
