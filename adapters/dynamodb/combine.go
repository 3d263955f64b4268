package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/fencekit/fencekit/fence"
)

// A name's item is one contended record: every admission, release,
// renewal and place kept in line is a read of it and an UpdateItem
// conditional on the revision read. When the callers of one Backend each
// did their own read and write, they raced one another: with sixteen
// waiters on one name, each renewing its place every third of the place
// TTL, most writes met another write of the same process between their
// read and their write, failed their condition and were tried again, and
// the retries' extra round trips slowed the server, which widened the
// window between read and write, which made more of them fail. The
// holder's release and the next waiter's admission queued behind that
// storm (issue 35).
//
// So a Backend combines its own writes of one item: the calls on a key
// wait in a queue, and one goroutine at a time takes the item's state (the
// one the Backend last wrote or read, cache.go, or a fresh read), applies
// every queued call to it in the order the calls came, each to the state
// the previous one left, and writes the result with one UpdateItem
// conditional on that state's revision and counter, raising the counter by
// the tokens all of them minted. Calls of one Backend never conflict with
// each other, and however many wait, one write (and at most one read)
// serves all that queued during the previous round trip. Each call's
// outcome is the one it would have had run alone in that order; a write
// that meets another Backend's write is tried again, all its calls applied
// afresh to the state read then.

// combiner is the queue of one item's calls.
type combiner struct {
	pending []*call
}

// call is one Acquire, Extend, Release or Leave waiting for its write.
type call struct {
	ctx  context.Context
	op   string
	f    func(st *state, it item, a ages, ver int64) change
	c    change
	err  error
	done chan struct{}
}

func (c *call) answer(ch change, err error) {
	c.c, c.err = ch, err
	close(c.done)
}

// update applies f to the state of the item key, as read with what has run
// out dropped, and writes the state when f changes it, conditional on the
// revision read. It queues f with the Backend's other calls on key; the
// first call on an idle key starts a goroutine that serves the queue in
// batches until it is empty. It returns once f's change is written (or
// needs no write), or when ctx ends: a write may then still land, as a
// request cut short may.
func (b *Backend) update(ctx context.Context, op, key string, f func(st *state, it item, a ages, ver int64) change) (change, error) {
	if err := ctx.Err(); err != nil {
		return change{}, err
	}
	c := &call{ctx: ctx, op: op, f: f, done: make(chan struct{})}
	b.combMu.Lock()
	q, busy := b.combs[key]
	if !busy {
		q = &combiner{}
		b.combs[key] = q
	}
	q.pending = append(q.pending, c)
	b.combMu.Unlock()
	if !busy {
		go b.serve(key, q)
	}
	select {
	case <-c.done:
		return c.c, c.err
	case <-ctx.Done():
		return change{}, ctx.Err()
	}
}

// serve writes the queued calls of key, batch by batch, until none is
// left; then it forgets the queue.
func (b *Backend) serve(key string, q *combiner) {
	for {
		b.combMu.Lock()
		batch := q.pending
		q.pending = nil
		if len(batch) == 0 {
			delete(b.combs, key)
			b.combMu.Unlock()
			return
		}
		b.combMu.Unlock()
		b.commit(key, batch)
	}
}

// commit applies the calls of batch in order to the item key and writes
// the result, and answers every call. It starts from the state this
// Backend last wrote or read (cache.go), without a read, when it knows
// one: the write is conditional on that state's revision, so it lands
// only if the item is still that state, and then every judgment made on
// it holds, entries' ages included (each was unchanged from when this
// Backend first saw it until the write). When the write meets another
// writer, or the calls would write nothing (their answers then rest on a
// state no write confirmed), it reads the item and starts again.
func (b *Backend) commit(key string, batch []*call) {
	known := true
	for attempt := 0; ; attempt++ {
		// A call whose caller has gone is not applied: its caller
		// returned the context's error and nothing of it was written.
		batch = slices.DeleteFunc(batch, func(c *call) bool {
			if err := c.ctx.Err(); err != nil {
				c.answer(change{}, err)
				return true
			}
			return false
		})
		if len(batch) == 0 {
			return
		}
		op := batch[0].op
		if len(batch) > 1 {
			op = fmt.Sprintf("%s (one write with %d more calls on the name)", op, len(batch)-1)
		}
		ctx, stop := anyLive(batch)
		var (
			it     item
			st     state
			a      ages
			err    error
			cached bool
		)
		if known {
			it, cached = b.cached(key)
		}
		if cached {
			it.at = b.now()
			st, a = b.seen(it)
		} else if it, st, a, err = b.current(ctx, op, key); err != nil {
			stop()
			answerAll(batch, err)
			return
		}
		results := make([]change, len(batch))
		minted, write := 0, false
		for i, c := range batch {
			// Each call sees the state the calls before it left, and mints
			// above the tokens they minted; a call that writes nothing
			// leaves the state as it was.
			trial := st.clone()
			at := it
			at.counter = it.counter + fence.Token(minted)
			ch := c.f(&trial, at, a, it.rev+1)
			if ch.write {
				st, minted, write = trial, minted+ch.minted, true
			}
			results[i] = ch
		}
		if !write {
			stop()
			if cached {
				known = false // answer from a state read now
				continue
			}
			for i, c := range batch {
				c.answer(results[i], nil)
			}
			return
		}
		sent := b.now()
		at, err := b.write(ctx, op, it, &st, minted)
		if err != nil {
			b.forget(key)
		}
		if errors.Is(err, errConflict) {
			known = false
			if !cached {
				err = backoff(ctx, attempt)
			} else {
				err = nil // a state this Backend knew went stale: read at once
			}
			stop()
			if err != nil {
				answerAll(batch, err)
				return
			}
			continue
		}
		stop()
		if err != nil {
			answerAll(batch, err)
			return
		}
		b.remember(item{key: key, exists: true, rev: it.rev + 1, counter: it.counter + fence.Token(minted), st: st.clone(), at: at})
		b.watch.note(key, &st, at)
		b.wrote(key, st, sent)
		for i, c := range batch {
			c.answer(results[i], nil)
		}
		return
	}
}

func answerAll(batch []*call, err error) {
	for _, c := range batch {
		c.answer(change{}, err)
	}
}

// anyLive returns a context that lives while any call of batch still
// waits (its caller's context has not ended), with the values of the
// first call's context.
func anyLive(batch []*call) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// clone returns a copy of s that shares no slice with it.
func (s state) clone() state {
	s.Holders = slices.Clone(s.Holders)
	s.Line = slices.Clone(s.Line)
	return s
}
