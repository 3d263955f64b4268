package dynamodb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// DefaultPollInterval is how often a Backend reads a name's item while
// waiters in line through it wait to be let in (one read for all of them),
// unless BackendOptions.PollInterval says otherwise. A release through the
// same Backend wakes its waiters at once.
const DefaultPollInterval = 50 * time.Millisecond

// DefaultLockPrefix is the prefix of a Backend's items unless
// BackendOptions.Prefix says otherwise.
const DefaultLockPrefix = "fencekit-lock/"

// BackendOptions configures a Backend. The zero value (or nil) is valid.
type BackendOptions struct {
	// Prefix is put before the partition key of every item the Backend
	// writes ("<prefix>lock/<name>", "<prefix>permit/<name>"), so that
	// it can share a table with a Store. DefaultLockPrefix when empty; at
	// most MaxPrefixLen bytes of UTF-8 without NUL.
	Prefix string
	// PollInterval is how often the Backend reads a name's item while
	// waiters in line wait on it; DefaultPollInterval when 0. At least a
	// millisecond.
	PollInterval time.Duration
}

// Backend is a lock backend (a driver.Backend for lock.NewClient) on a
// DynamoDB table: one item per lock name and one per permit name, each
// holding the name's holders and line of waiters, a revision, and the
// name's token counter. Every change is one UpdateItem conditional on the
// revision (and counter) of the state it was decided on, so each
// admission, renewal and release is atomic, and the token a grant mints is
// counted up in that same request. The calls of a Backend on one name
// share their writes (combine.go) and its waiters share their reads
// (poll.go).
//
// A Backend never trusts a clock: an entry has run out once this Backend
// has watched it unchanged for its whole TTL (see watch.go). A Backend
// keeps what it has watched in memory; use one Backend per process.
//
// Sets of names are taken one by one by the Client (Acquire answers
// driver.ErrNotAtomic): dynalite, the server the tests run on, has no
// TransactWriteItems.
type Backend struct {
	api    API
	table  string
	prefix string
	poll   time.Duration
	watch  watch
	// now is this machine's clock; only durations between its readings
	// are used. Tests set one that is off by a constant (export_test.go).
	now func() time.Time

	// pollMu guards pollers, the readers of the items Awaits wait on
	// (poll.go).
	pollMu  sync.Mutex
	pollers map[string]*poller

	// combMu guards combs, the queues of calls waiting to write each
	// item (combine.go).
	combMu sync.Mutex
	combs  map[string]*combiner

	// cacheMu guards cache, the newest state the Backend knows of each
	// item it has live entries on (cache.go).
	cacheMu sync.Mutex
	cache   map[string]item
}

var _ driver.Backend = (*Backend)(nil)

// NewBackend returns a Backend on table (made by Migrate, or with the key
// schema of CreateTableInput). It returns an error matching fence.ErrInvalid
// for a nil api, an invalid table name or invalid options.
func NewBackend(api API, table string, opts *BackendOptions) (*Backend, error) {
	if api == nil {
		return nil, fence.Invalid("nil DynamoDB client")
	}
	if err := validateTable(table); err != nil {
		return nil, err
	}
	var o BackendOptions
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultLockPrefix
	}
	if len(o.Prefix) > MaxPrefixLen || strings.IndexByte(o.Prefix, 0) >= 0 || !utf8.ValidString(o.Prefix) {
		return nil, fence.Invalid("prefix %q: want at most %d bytes of UTF-8 without NUL", o.Prefix, MaxPrefixLen)
	}
	switch {
	case o.PollInterval == 0:
		o.PollInterval = DefaultPollInterval
	case o.PollInterval < time.Millisecond:
		return nil, fence.Invalid("poll interval %v is below a millisecond", o.PollInterval)
	}
	return &Backend{api: api, table: table, prefix: o.Prefix, poll: o.PollInterval, now: time.Now, pollers: map[string]*poller{}, combs: map[string]*combiner{}, cache: map[string]item{}}, nil
}

// key is the partition key of the item of name: a lock's, or a permit
// name's when kind is a permit kind.
func (b *Backend) key(name string, kind driver.Kind) string {
	if kind.Permit() {
		return b.prefix + "permit/" + name
	}
	return b.prefix + "lock/" + name
}

// backoff waits a short random time before a call reads an item again
// after losing a race to write it, so that contenders spread out.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(attempt, 5), 20*time.Millisecond)) + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Acquire admits req.Owner as req asks: a lock, with or without a place
// in line, a resumed lease, or a permit. A set of names answers
// driver.ErrNotAtomic, and the Client takes the names one by one.
func (b *Backend) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Names != nil {
		return driver.Grant{}, fmt.Errorf("%w: DynamoDB Backend takes sets name by name", driver.ErrNotAtomic)
	}
	c, err := b.update(ctx, "acquire "+quote(req.Name), b.key(req.Name, req.Kind), func(st *state, it item, a ages, ver int64) change {
		return st.acquire(req, it.counter, ver, a)
	})
	if err != nil {
		return driver.Grant{}, err
	}
	return c.grant, c.err
}

// Extend renews the claimed lease to ttl from now.
func (b *Backend) Extend(ctx context.Context, c driver.Claim, ttl time.Duration) error {
	ch, err := b.update(ctx, "extend "+quote(c.Name), b.key(c.Name, c.Kind), func(st *state, _ item, _ ages, ver int64) change {
		return st.extend(c.Name, c.Owner, ttl, ver)
	})
	if err != nil {
		return err
	}
	return ch.err
}

// Release gives up the claimed lease; waiters through this Backend are
// woken at once, others at their next poll.
func (b *Backend) Release(ctx context.Context, c driver.Claim) error {
	ch, err := b.update(ctx, "release "+quote(c.Name), b.key(c.Name, c.Kind), func(st *state, _ item, _ ages, _ int64) change {
		return st.release(c.Name, c.Owner)
	})
	if err != nil {
		return err
	}
	return ch.err
}

// Leave gives up the claim's owner's place in line, if it has one.
func (b *Backend) Leave(ctx context.Context, c driver.Claim) error {
	_, err := b.update(ctx, "leave "+quote(c.Name), b.key(c.Name, c.Kind), func(st *state, _ item, _ ages, _ int64) change {
		return st.leave(c.Owner)
	})
	return err
}

// Await blocks until the claim's owner would be let in (or has no place in
// line), max has passed or ctx ends. It judges by the readings of the
// name's item that the Backend's poller of the item takes every poll
// interval for all its Awaits, and by the state each write through this
// Backend leaves (poll.go): only by those sent after it began to wait.
func (b *Backend) Await(ctx context.Context, c driver.Claim, max time.Duration) error {
	deadline := b.now().Add(max)
	key := b.key(c.Name, c.Kind)
	p := b.joinPoll(key)
	defer b.leavePoll(key, p)
	since := b.now()
	for {
		r, next := b.newest(p)
		if r != nil && !r.sent.Before(since) {
			if r.err != nil {
				// Await may return early: the Client's next Acquire reports
				// a failure that lasts.
				return ctx.Err()
			}
			if r.st.letsIn(c.Owner) {
				return nil
			}
			since = r.sent.Add(1) // judge by a newer one
		}
		wait := deadline.Sub(b.now())
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-next:
		case <-t.C:
		}
		t.Stop()
	}
}

// Inspect reports the lock (kind Exclusive) or the permit name called name
// as this Backend sees it: entries it has not watched for their TTL are
// live, with their remaining TTL counted from when it first saw them.
func (b *Backend) Inspect(ctx context.Context, name string, kind driver.Kind) (driver.Info, error) {
	_, st, a, err := b.current(ctx, "inspect "+quote(name), b.key(name, kind))
	if err != nil {
		return driver.Info{}, err
	}
	return st.info(name, kind, a), nil
}

// current reads the item key, notes what it holds in the watch, and
// returns it with its state less the entries that have run out, and the
// ages of its entries.
func (b *Backend) current(ctx context.Context, op, key string) (item, state, ages, error) {
	it, err := b.read(ctx, op, key)
	if err != nil {
		return item{}, state{}, nil, err
	}
	b.remember(it)
	st, a := b.seen(it)
	return it, st, a, nil
}

// seen notes the read it in the watch and returns its state less the
// entries that have run out, and the ages of its entries.
func (b *Backend) seen(it item) (state, ages) {
	a := b.watch.note(it.key, &it.st, it.at)
	st := it.st
	st.dropExpired(a)
	return st, a
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
