package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// MultiLease is one acquisition of a set of locks (Client.AcquireMulti): a
// lease per name, each with its own fencing token, under one owner value.
// It is safe for concurrent use.
//
// The fencing rule is per name: a write to the resource that name guards
// carries Token(name) (Lease(name).Fenced(store) does that), so that each
// resource refuses a writer whose lease on its own name was superseded.
//
// The set lives and dies as one: it ends when it is released, or when any of
// its leases is lost (its local deadline passed, the backend said it is no
// longer held, a renewal failed for good, or it was released on its own).
// Then Done is closed, Context is cancelled and Err says why (ErrReleased,
// or an error matching ErrLost), and the other leases of a lost set are
// released in the background. One keep-alive renews every lease of the set.
type MultiLease struct {
	client *Client
	owner  string
	names  []string // sorted
	leases []*Lease // in the order of names

	ctx    context.Context
	cancel context.CancelCauseFunc
	// values carries the acquiring context's values, not its
	// cancellation, for the keep-alive and the releases after a loss.
	values context.Context

	mu        sync.Mutex
	ttl       time.Duration
	ended     bool
	cause     error
	releasing bool               // Release was called: its members' ends are not a loss
	ka        context.CancelFunc // nil unless the keep-alive runs
}

// newMultiLease wraps the tokens of set, acquired for ttl, in a
// MultiLease whose leases share deadline (from before the request that took
// them), reports each lease to the Observer as acquired (began is when the
// acquiring call began, attempt its number), and starts the keep-alive when
// asked. ambiguous says that an earlier attempt may still land.
func (c *Client) newMultiLease(mdctx context.Context, set []string, owner string, tokens []fence.Token, ttl time.Duration, deadline time.Time, ambiguous, keepAlive bool, began time.Time, attempt int) *MultiLease {
	m := &MultiLease{client: c, owner: owner, names: set, ttl: ttl}
	m.values = context.WithoutCancel(mdctx)
	m.ctx, m.cancel = context.WithCancelCause(m.values)
	md := metadataFromContext(mdctx)
	for i, name := range set {
		l := newLease(mdctx, c, name, owner, tokens[i], ttl, deadline)
		l.mu.Lock()
		l.metadata = md
		l.mu.Unlock()
		if ambiguous {
			l.mayLandLate(ttl) // an earlier attempt may still land: see Lease.Extend
		}
		m.leases = append(m.leases, l)
	}
	for _, l := range m.leases {
		l.emit(Event{kind: eventAcquired, Name: l.name, Token: l.token, Attempt: attempt, Elapsed: time.Since(began)})
		context.AfterFunc(l.ctx, func() { m.memberEnded(l) })
	}
	if keepAlive {
		m.startKeepAlive()
	}
	return m
}

// Names returns the set's lock names, sorted.
func (m *MultiLease) Names() []string { return slices.Clone(m.names) }

// Owner returns the owner value that holds every lease of the set.
func (m *MultiLease) Owner() string { return m.owner }

// Token returns the fencing token of name's lease, or 0 when name is not in
// the set. Pass it with every write to the resource that name guards.
func (m *MultiLease) Token(name string) fence.Token {
	if l := m.Lease(name); l != nil {
		return l.Token()
	}
	return 0
}

// Lease returns the lease on name, or nil when name is not in the set. Use
// it for its token and its Fenced writer; release the set, not one lease
// alone: releasing a member on its own ends the set as lost.
func (m *MultiLease) Lease(name string) *Lease {
	if i, ok := slices.BinarySearch(m.names, name); ok {
		return m.leases[i]
	}
	return nil
}

// Deadline returns the earliest local deadline of the set's leases: the
// whole set is certainly valid until then.
func (m *MultiLease) Deadline() time.Time {
	var d time.Time
	for i, l := range m.leases {
		if ld := l.Deadline(); i == 0 || ld.Before(d) {
			d = ld
		}
	}
	return d
}

// Err returns nil while every lease of the set is live, then the error that
// ended the set: ErrReleased, or an error matching ErrLost and naming the
// lease that was lost. Like Lease.Err, it looks at the local deadlines
// itself.
func (m *MultiLease) Err() error {
	m.mu.Lock()
	ended, cause := m.ended, m.cause
	m.mu.Unlock()
	if ended {
		return cause
	}
	for _, l := range m.leases {
		if err := l.Err(); errors.Is(err, ErrLost) {
			return m.lose(l, err)
		}
	}
	return nil
}

// Done returns a channel that is closed when the set is released or lost.
// Like Err, it looks at the deadlines first.
func (m *MultiLease) Done() <-chan struct{} {
	m.Err()
	return m.ctx.Done()
}

// Context returns a context that is cancelled when the set is released or
// lost; context.Cause tells which.
func (m *MultiLease) Context() context.Context { return multiContext{m.ctx, m} }

// multiContext is the set's context as Context gives it out: its Done and
// Err look at the deadlines first.
type multiContext struct {
	context.Context
	m *MultiLease
}

func (c multiContext) Done() <-chan struct{} { return c.m.Done() }

func (c multiContext) Err() error {
	c.m.Err()
	return c.Context.Err()
}

// Extend renews every lease of the set for ttl from now, all at once, each
// as Lease.Extend does. It returns nil only if every renewal succeeded;
// when one lease is lost on the way, the set is lost.
func (m *MultiLease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := m.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	errs := make([]error, len(m.leases))
	var wg sync.WaitGroup
	for i, l := range m.leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Extend(ctx, ttl)
		}()
	}
	wg.Wait()
	if err := m.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.mu.Lock()
	m.ttl = ttl
	m.mu.Unlock()
	return nil
}

// Release gives up every lock of the set, all at once, each as
// Lease.Release does; it stops the keep-alive first. It returns nil when
// every lease was released (or the set was released before). When the
// backend no longer holds one of them, the set is lost and the error matches
// ErrNotHeld and ErrLost. After any other error the outcome is unknown for
// some leases and Release may be called again; do no more work under the set
// once Release was called.
func (m *MultiLease) Release(ctx context.Context) error {
	m.stopKeepAlive()
	m.mu.Lock()
	if m.ended && errors.Is(m.cause, ErrReleased) {
		m.mu.Unlock()
		return nil
	}
	m.releasing = true
	m.mu.Unlock()
	errs := make([]error, len(m.leases))
	var wg sync.WaitGroup
	for i, l := range m.leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Release(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, ErrNotHeld) {
			return m.lose(m.leases[i], err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.end(ErrReleased)
	return nil
}

// memberEnded runs when one lease of the set ends: a loss, or a release
// that Release did not make, loses the set.
func (m *MultiLease) memberEnded(l *Lease) {
	cause := context.Cause(l.ctx)
	m.mu.Lock()
	releasing := m.releasing
	m.mu.Unlock()
	if errors.Is(cause, ErrReleased) && releasing {
		return
	}
	m.lose(l, cause)
}

// errMemberReleased is why a set is lost when one of its leases was
// released on its own.
var errMemberReleased = errors.New("one lease of the set was released on its own")

// lose ends the set as lost because of l's end, once, releases the set's
// other leases in the background (bounded by the ttl), and returns an error
// that matches ErrLost and cause.
func (m *MultiLease) lose(l *Lease, cause error) error {
	if errors.Is(cause, ErrReleased) {
		cause = fmt.Errorf("%w: %w", errMemberReleased, cause)
	}
	err := fmt.Errorf("%w: set %q: lease on %q ended: %w", ErrLost, m.names, l.name, cause)
	if m.end(err) {
		m.stopKeepAlive()
		m.mu.Lock()
		ttl := m.ttl
		m.mu.Unlock()
		go m.releaseRest(ttl)
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cause
}

// releaseRest releases the leases of a lost set, the lost one included
// (lost by its local deadline, it may still be held on the server), each
// tried again after a failure whose outcome is unknown (a conflict with the
// renewal in flight, say), until ttl has passed, after which the backend has
// let them expire anyway.
func (m *MultiLease) releaseRest(ttl time.Duration) {
	ctx, cancel := context.WithTimeout(m.values, ttl)
	defer cancel()
	for _, l := range m.leases {
		for pause := time.Millisecond; !errors.Is(l.Err(), ErrReleased); pause = min(2*pause, 100*time.Millisecond) {
			err := l.Release(ctx)
			if err == nil || errors.Is(err, ErrNotHeld) || !sleep(ctx, pause) {
				break
			}
		}
	}
}

// end ends the set with cause, once, and reports whether this call did.
func (m *MultiLease) end(cause error) bool {
	m.mu.Lock()
	if m.ended {
		m.mu.Unlock()
		return false
	}
	m.ended, m.cause = true, cause
	m.mu.Unlock()
	m.cancel(cause)
	return true
}
