package dynamodb

import (
	"context"
	"time"
)

// The Awaits of a Backend on one item share one reader of it. Each waiter
// reading the item every poll interval, and again whenever a write through
// the Backend rang, made sixteen waiters on one name some three hundred
// strongly consistent reads a second of one item, and fifteen more after
// every write: the load that slowed every request to the server, the
// writes that admit and release included (issue 35). Now one goroutine per
// item, while any Await waits on it, reads the item every poll interval
// and hands each reading to all of them; a write through the Backend hands
// them the state it wrote at once, with no read. A waiter judges only by a
// reading sent after it began to wait, as it did by its own reads.

// poller is the reader of one item for the Awaits of a Backend on it.
type poller struct {
	waiters int
	cancel  context.CancelFunc
	latest  *reading      // the newest reading, nil before the first
	next    chan struct{} // closed when a newer reading is handed out
}

// reading is one state of the item: read, or written by the Backend.
type reading struct {
	sent time.Time // when the request was sent: the state is as of then or later
	st   state
	err  error
}

// joinPoll counts an Await in on key's poller, starting it if none runs.
func (b *Backend) joinPoll(key string) *poller {
	b.pollMu.Lock()
	defer b.pollMu.Unlock()
	p := b.pollers[key]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &poller{cancel: cancel, next: make(chan struct{})}
		b.pollers[key] = p
		go b.pollLoop(ctx, key, p)
	}
	p.waiters++
	return p
}

// leavePoll counts an Await out; the last one out stops the poller.
func (b *Backend) leavePoll(key string, p *poller) {
	b.pollMu.Lock()
	defer b.pollMu.Unlock()
	if p.waiters--; p.waiters == 0 {
		p.cancel()
		if b.pollers[key] == p {
			delete(b.pollers, key)
		}
	}
}

// newest returns p's newest reading and the channel closed when a newer
// one comes.
func (b *Backend) newest(p *poller) (*reading, <-chan struct{}) {
	b.pollMu.Lock()
	defer b.pollMu.Unlock()
	return p.latest, p.next
}

// hand gives r to the waiters of p, unless they already have a reading
// sent later.
func (b *Backend) hand(p *poller, r *reading) {
	b.pollMu.Lock()
	defer b.pollMu.Unlock()
	if p.latest != nil && r.sent.Before(p.latest.sent) {
		return
	}
	p.latest = r
	close(p.next)
	p.next = make(chan struct{})
}

// wrote hands the state a write through the Backend left in the item key
// (the write was sent at sent) to the Awaits on key, if any.
func (b *Backend) wrote(key string, st state, sent time.Time) {
	b.pollMu.Lock()
	p := b.pollers[key]
	b.pollMu.Unlock()
	if p != nil {
		b.hand(p, &reading{sent: sent, st: st.clone()})
	}
}

// pollLoop reads the item key every poll interval until ctx ends.
func (b *Backend) pollLoop(ctx context.Context, key string, p *poller) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := b.now()
		_, st, _, err := b.current(ctx, "await "+quote(key), key)
		if ctx.Err() != nil {
			return
		}
		b.hand(p, &reading{sent: sent, st: st, err: err})
		t.Reset(b.poll)
	}
}
