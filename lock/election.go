package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
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
// ends: then the error matches ErrNotAcquired and ctx.Err(). An error that
// a retry cannot cure (Retryable false) is returned at once, as by
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
// nil; one already lost returns an error matching ErrNotHeld and ErrLost.
// See Lease.Release for an outcome that is unknown.
func (l *Leadership) Resign(ctx context.Context) error { return l.lease.Release(ctx) }

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
}

// Leader asks the backend for the current leader. With no leader it
// returns ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.client.usable(); err != nil {
		return Leader{}, err
	}
	info, err := e.client.backend.Inspect(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	if !info.Held {
		return Leader{}, fmt.Errorf("%w: %q", ErrNoLeader, e.name)
	}
	return Leader{
		Name:     e.name,
		Term:     info.Token,
		Metadata: info.Metadata,
		TTL:      info.TTL,
		Since:    e.saw(info.Token, time.Now()),
	}, nil
}

// Observe polls the backend every interval (ttl/4 when interval is 0 or
// less) and sends the leader on the channel whenever the term changes, and
// a Leader with Term 0 when the election has no leader. The first value is
// sent after the first poll. A poll that fails is skipped. The channel is
// closed when ctx ends; a receiver that falls behind sees only the latest
// change (a change it missed is dropped, never queued), so it never slows
// the poll down.
func (e *Election) Observe(ctx context.Context, interval time.Duration) <-chan Leader {
	if interval <= 0 {
		interval = max(e.ttl/4, time.Millisecond)
	}
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		var last Leader
		first := true
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			cur, err := e.Leader(ctx)
			switch {
			case err == nil, errors.Is(err, ErrNoLeader):
				if err != nil {
					cur = Leader{Name: e.name}
				}
				if first || cur.Term != last.Term {
					first = false
					last = cur
					select { // drop an unread older value: only the latest counts
					case <-out:
					default:
					}
					out <- cur
				}
			}
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
// When fn returns while the leadership lasts, Lead resigns and returns fn's
// error (nil included). When fn returns after the leadership was lost, its
// error is dropped and Lead campaigns again. When ctx ends, Lead resigns if
// it leads and returns an error matching ctx.Err(). A permanent error from
// the backend (see Campaign) is returned at once. If fn panics, Lead
// resigns and lets the panic go on.
func (c *Client) Lead(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Leadership) error) error {
	if fn == nil {
		return fence.Invalid("nil function")
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

// run runs fn under l, resigns when fn returns unless the leadership was
// lost meanwhile, and reports whether it was.
func (l *Leadership) run(ctx context.Context, fn func(context.Context, *Leadership) error) (lost bool, err error) {
	fnCtx, cancel := withLease(ctx, l.lease)
	if broken.leadKeepsLostTerm { // a test-only variant, see simhooks.go
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
	if errors.Is(l.Err(), ErrLost) {
		return true, fnErr
	}
	relErr := releaseAfterDo(ctx, l.lease, l.election.ttl)
	if ctx.Err() != nil && fnErr == nil {
		fnErr = ctx.Err()
	}
	// A release that finds the lease lost (between fn's return and the
	// release) is reported with fn's result: fn's work ran while leading.
	return false, errors.Join(fnErr, relErr)
}
