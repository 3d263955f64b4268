package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// ErrNoLeader means an election has no leader at the moment: the lock is
// free.
var ErrNoLeader = errors.New("lock: no leader")

// Election is leader election over any Backend: the candidates that
// campaign for the same name on the same backend take turns leading, one at
// a time. A leadership is a lease, and its term is the lease's token, so
// every term is greater than every earlier term of the election. Fencing
// with the term (Leadership.Fenced, or the token given to a Guard) is what
// keeps an old leader that was paused past its lease from acting after a
// newer one took over: without it, no election built on leases can promise
// a single leader.
//
// An Election is safe for concurrent use. Get it from Client.Election.
type Election struct {
	client *Client
	name   string
	ttl    time.Duration

	mu       sync.Mutex
	seenTerm fence.Token // the newest term this Election has seen
	seenAt   time.Time   // when it first saw it
}

// Election returns the election named name, whose leaderships last ttl
// unless renewed. The leader's lease is kept alive, so ttl bounds how long
// the election stays without a leader after one dies without resigning.
// The name and ttl are checked when the Election is used: a bad one makes
// Campaign and Leader fail with ErrInvalid.
func (c *Client) Election(name string, ttl time.Duration) *Election {
	return &Election{client: c, name: name, ttl: ttl}
}

// Name returns the election's name (the name of its lock).
func (e *Election) Name() string { return e.name }

// Leadership is one term of one leader. It ends when the leader resigns or
// the lease behind it is lost; then Done is closed and Context cancelled.
type Leadership struct {
	election *Election
	lease    *Lease
	since    time.Time
}

// Campaign blocks until this candidate leads, and returns its leadership,
// whose lease is kept alive. It retries while another candidate leads (or
// an attempt fails transiently), however many attempts it takes, until ctx
// ends: then the error matches ErrNotAcquired and ctx.Err(). When the
// backend is unreachable for Options.MaxUnreachable (see Client.Acquire),
// it gives up with an error matching ErrNotAcquired and ErrUnreachable;
// waiting for another leader is never cut short by that bound. An error that
// a retry cannot cure is returned at once, as by
// Client.Acquire. The backoff between attempts is the Client's and never
// longer than the leader's remaining TTL, when the backend reports it.
func (e *Election) Campaign(ctx context.Context) (*Leadership, error) {
	if err := e.client.usable(); err != nil {
		return nil, err
	}
	lease, err := e.client.Acquire(ctx, e.name, e.ttl, WithKeepAlive(true), WithMaxAttempts(0))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	e.saw(lease.Token(), now)
	return &Leadership{election: e, lease: lease, since: now}, nil
}

// saw records that term was seen at t, and returns when this Election first
// saw it.
func (e *Election) saw(term fence.Token, t time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if term > e.seenTerm {
		e.seenTerm, e.seenAt = term, t
	}
	if term == e.seenTerm {
		return e.seenAt
	}
	return time.Time{} // an older term than one already seen: no claim
}

// Term returns the leadership's term: its lease's token. Pass it with every
// write the leader makes, so that the resource refuses this leader's writes
// once a newer term exists.
func (l *Leadership) Term() fence.Token { return l.lease.Token() }

// Since returns when Campaign won this term, on this process's clock.
func (l *Leadership) Since() time.Time { return l.since }

// Lease returns the lease behind the leadership.
func (l *Leadership) Lease() *Lease { return l.lease }

// Done returns a channel that is closed when the leadership ends: resigned
// or lost.
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Context returns a context that is cancelled when the leadership ends;
// context.Cause says why (ErrReleased after Resign, or an error matching
// ErrLost).
func (l *Leadership) Context() context.Context { return l.lease.Context() }

// Err returns nil while the leadership lasts, then why it ended: an error
// matching ErrReleased (resigned) or ErrLost.
func (l *Leadership) Err() error { return l.lease.Err() }

// Fenced returns a Writer that writes to store with the term as the token.
func (l *Leadership) Fenced(store fence.Store) *Writer { return l.lease.Fenced(store) }

// Resign gives the leadership up, so that another candidate can take over
// at once rather than after the TTL. Resigning a resigned leadership returns
// nil; one already lost returns an error matching ErrNotHeld and ErrLost,
// also when it was lost only on this side (its local deadline passed, say)
// and the backend still held it: Resign then still releases it there, so
// that the next candidate need not wait for the TTL. See Lease.Release for
// an outcome that is unknown.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.lease.Release(ctx)
	if err != nil {
		return err
	}
	// Releasing a lease that was lost here but still held by the backend
	// succeeds, and leaves the lease lost: the leadership had ended anyway.
	if lost := l.lease.Err(); errors.Is(lost, ErrLost) {
		return fmt.Errorf("%w: %w", ErrNotHeld, lost)
	}
	return nil
}

// Leader describes the current leader of an election, as its backend sees
// it.
type Leader struct {
	Name string      // the election's name
	Term fence.Token // the leader's term (its lease's token)
	// Metadata is what the leader's Client attached (Options.Metadata):
	// which process leads.
	Metadata string
	// TTL is the leader's remaining time to live if it stops renewing.
	TTL time.Duration
	// Since is when this Election first saw the term (by Leader, Observe or
	// winning it): the term began no later than that. Backends keep no
	// start time, so an Election that has just been created reports the
	// moment of its first look.
	Since time.Time
	// ReadAt is when this view was read from the backend, on this
	// process's clock; zero if it never was (a value of Observe whose
	// first poll failed).
	ReadAt time.Time
	// Err is nil in every Leader that Election.Leader returns. In a value
	// that Observe sends, it is the error of the poll that failed: the
	// other fields are then the last view read, as of ReadAt, and may be
	// stale.
	Err error
}

// Leader asks the backend for the current leader. With no leader it
// returns ErrNoLeader. A bad name or TTL (one that Campaign would refuse)
// gets ErrInvalid and nothing is sent.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.validate(); err != nil {
		return Leader{}, err
	}
	info, err := e.client.lockClient().inspect(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	if len(info.Holders) == 0 {
		return Leader{}, fmt.Errorf("%w: %q", ErrNoLeader, e.name)
	}
	h := info.Holders[0]
	now := time.Now()
	return Leader{
		Name:     e.name,
		Term:     h.Token,
		Metadata: h.Metadata,
		TTL:      h.TTL,
		Since:    e.saw(h.Token, now),
		ReadAt:   now,
	}, nil
}

// validate refuses what Campaign would refuse: a nil client, a bad name, or
// a TTL too short for a kept-alive lease under the Client's Options.
func (e *Election) validate() error {
	if err := e.client.usable(); err != nil {
		return err
	}
	if e.name == "" {
		return driver.Invalid("empty election name")
	}
	if err := fence.ValidateKey(e.name); err != nil {
		return fmt.Errorf("election name: %w", err)
	}
	return e.client.opts.checkTTL(e.ttl, true)
}

// Observe polls the backend every interval (ttl/4 when interval is 0 or
// less) and sends the leader on the channel whenever the term changes, and
// a Leader with Term 0 when the election has no leader. The first value is
// sent after the first poll. Every value's ReadAt says when it was read.
//
// A failed poll is reported, not skipped: when a poll fails after one that
// succeeded (or the first poll fails), Observe sends the last view it read
// with Err set to the poll's error and ReadAt left at that read; when polls
// succeed again it sends the current view with Err nil, changed term or
// not. So while the latest value received has Err nil, the backend is
// answering, and the view is as fresh as the last poll, about one interval
// old at most.
//
// A bad name or TTL (see Leader) is sent once, in Err (matching
// ErrInvalid), and the channel closed; nothing is polled. Otherwise the
// channel is closed when ctx ends. A receiver that falls behind sees only
// the latest value (one it missed is dropped, never queued), so it never
// slows the poll down.
func (e *Election) Observe(ctx context.Context, interval time.Duration) <-chan Leader {
	out := make(chan Leader, 1)
	if err := e.validate(); err != nil {
		out <- Leader{Name: e.name, Err: err}
		close(out)
		return out
	}
	if interval <= 0 {
		interval = max(e.ttl/4, time.Millisecond)
	}
	send := func(v Leader) {
		select { // drop an unread older value: only the latest counts
		case <-out:
		default:
		}
		out <- v
	}
	go func() {
		defer close(out)
		var (
			sent    Leader // the last value sent
			read    = Leader{Name: e.name}
			first   = true
			failing bool
		)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			cur, err := e.Leader(ctx)
			switch {
			case err == nil, errors.Is(err, ErrNoLeader):
				if err != nil {
					cur = Leader{Name: e.name, ReadAt: time.Now()}
				}
				read = cur
				if first || failing || cur.Term != sent.Term {
					sent = cur
					send(cur)
				}
				failing = false
			case ctx.Err() != nil:
				return // the poll was cut short by ctx: no news
			default:
				if first || !failing {
					stale := read
					stale.Err = err
					sent = stale
					send(stale)
				}
				failing = true
			}
			first = false
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return out
}

// Lead campaigns for name, runs fn while this process leads, and campaigns
// again whenever the leadership is lost, until fn returns while still
// leading or ctx ends. fn's context is cancelled when the leadership ends
// or ctx ends; fn must then return soon, since a lost leader's writes are
// refused by fenced resources but nothing else stops them.
//
// When fn returns, the leadership counts as lost if any of these holds:
//
//   - its lease was lost (fn's context ended with ErrLost);
//   - fn's error matches fence.ErrStale: a fenced resource has seen a newer
//     term, so another leader was elected, although this process may not
//     have noticed yet (evicted on the backend by an operator's force
//     release, or by a pause past the TTL);
//   - the release after fn finds the lease no longer held (ErrNotHeld):
//     evicted on the backend, so fn cannot be said to have returned while
//     leading.
//
// Then fn's result (nil included) is dropped, the lease is released in
// case the backend still holds it, and Lead campaigns again: fn runs again
// under a new term, greater than the lost one, never twice under one term.
// Otherwise fn returned while leading: Lead resigns and returns fn's error
// (nil included), joined with the release's error if the release failed
// otherwise. When ctx ends, Lead resigns if it leads and returns an error
// matching ctx.Err(). A permanent error from the backend, or a backend
// unreachable for Options.MaxUnreachable (see Campaign), is returned at
// once. If fn panics, Lead resigns and lets the panic go on.
func (c *Client) Lead(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Leadership) error) error {
	if fn == nil {
		return driver.Invalid("nil function")
	}
	e := c.Election(name, ttl)
	for {
		l, err := e.Campaign(ctx)
		if err != nil {
			return err // when ctx ended, err matches ctx.Err() too
		}
		lost, fnErr := l.run(ctx, fn)
		if !lost {
			return fnErr
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// run runs fn under l, releases the lease when fn returns, and reports
// whether the leadership was lost (see Lead for the rule).
func (l *Leadership) run(ctx context.Context, fn func(context.Context, *Leadership) error) (lost bool, err error) {
	fnCtx, cancel := withLease(ctx, l.lease)
	if brokenBuild && broken.leadKeepsLostTerm { // a test-only variant, see simhooks.go
		fnCtx, cancel = context.WithCancelCause(ContextWithLease(ctx, l.lease))
	}
	returned := false
	defer func() {
		if !returned {
			cancel(errFnDidNotReturn)
			_ = releaseAfterDo(ctx, l.lease, l.election.ttl)
		}
	}()
	fnErr := fn(fnCtx, l)
	returned = true
	cancel(nil)
	lostBefore := errors.Is(l.Err(), ErrLost) || errors.Is(fnErr, fence.ErrStale)
	// Released even when lost: a lease lost on this side, or overtaken on
	// a fenced resource, may still be held by the backend, and the next
	// campaign (a new owner) would wait for it to expire.
	relErr := releaseAfterDo(ctx, l.lease, l.election.ttl)
	if lostBefore || errors.Is(relErr, ErrNotHeld) {
		return true, fnErr
	}
	if ctx.Err() != nil && fnErr == nil {
		fnErr = ctx.Err()
	}
	return false, errors.Join(fnErr, relErr)
}
