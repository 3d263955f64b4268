package lock

import (
	"context"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// The Client's calls to its driver. Every request is checked here, once,
// before the driver sees it (driver.Validate); the driver may assume it is
// valid. A Client (or the copy of it that one call of Semaphore, RWLock or a
// queued Acquire makes) asks for one kind of lease: kind and limit say
// which, and place is the place in line it keeps while it waits, 0 when it
// does not wait in line.

// grant makes one acquire request for owner on name.
func (c *Client) grant(ctx context.Context, name, owner string, ttl time.Duration) (driver.Grant, error) {
	req := driver.Request{
		Name: name, Owner: owner, TTL: ttl,
		Kind: c.kind, Limit: c.limit, Place: c.place,
		Metadata: metadataFromContext(ctx),
	}
	if err := driver.Validate(req); err != nil {
		return driver.Grant{}, err
	}
	g, err := c.driver.Acquire(ctx, req)
	return g, heldShape(err, req)
}

// heldShape fills in the shape of req on a *driver.HeldError that a
// driver returned without it (a copy, the driver's own error is left as
// it is), so that a full semaphore's refusal says it is one whatever the
// backend.
func heldShape(err error, req driver.Request) error {
	he, ok := err.(*driver.HeldError)
	if !ok || he.Kind != 0 && (req.Kind != driver.Semaphore || he.Permits > 0) {
		return err
	}
	cp := *he
	if cp.Kind == 0 {
		cp.Kind = req.Kind
	}
	if cp.Kind == driver.Semaphore && cp.Permits == 0 {
		cp.Permits = req.Limit
	}
	return &cp
}

// check refuses a request that the driver would be sent with bad input
// before anything is sent: the name, owner, ttl, the kind and its limit, and
// the place in line when queued.
func (c *Client) check(name, owner string, ttl time.Duration, queued bool) error {
	if err := c.usable(); err != nil {
		return err
	}
	req := driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: c.kind, Limit: c.limit}
	if queued {
		req.Place = c.opts.Queue.placeTTL()
	}
	return driver.Validate(req)
}

// claim names owner's lease (or place) on name, of the Client's kind.
func (c *Client) claim(name, owner string) driver.Claim {
	return driver.Claim{Name: name, Owner: owner, Kind: c.kind}
}

// release gives up owner's lease on name.
func (c *Client) release(ctx context.Context, name, owner string) error {
	return c.driver.Release(ctx, c.claim(name, owner))
}

// inspect asks the driver about name, checking the name first.
func (c *Client) inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := c.usable(); err != nil {
		return driver.Info{}, err
	}
	if err := driver.ValidateName(name); err != nil {
		return driver.Info{}, err
	}
	return c.driver.Inspect(ctx, name, c.kind)
}

// Info describes a lock, a semaphore or a read-write lock as its backend
// sees it (Client.Inspect, Semaphore.Inspect, RWLock.Inspect).
type Info struct {
	Name string
	// Limit is a semaphore's number of permits; 0 otherwise, and 0 for a
	// semaphore that nobody holds or waits for.
	Limit int
	// Holders are the live leases, in no particular order: at most one
	// for a lock.
	Holders []Holder
	// Waiting is how many callers wait in line.
	Waiting int
	// LastWriter is, for a read-write lock, the token of the newest write
	// permit ever granted (see Lease.PriorWriter); 0 otherwise.
	LastWriter fence.Token
}

// Holder is one live lease: a lock's holder, or one permit.
type Holder struct {
	Owner string      // the holder's owner value (Lease.Owner)
	Token fence.Token // its fencing token
	TTL   time.Duration
	// Writer is true for a read-write lock's write permit.
	Writer bool
	// Metadata is what the holder's Client attached (Options.Metadata,
	// ContextWithMetadata): which process holds the lock. "" when none, and
	// for permits.
	Metadata string
}

// Held reports whether anyone holds the name.
func (i Info) Held() bool { return len(i.Holders) > 0 }

// infoOf converts what the driver reports into what users read.
func infoOf(di driver.Info) Info {
	info := Info{Name: di.Name, Waiting: di.Waiting, LastWriter: di.LastWriter}
	if di.Kind == driver.Semaphore {
		info.Limit = di.Limit
	}
	if len(di.Holders) > 0 {
		info.Holders = make([]Holder, len(di.Holders))
		for i, h := range di.Holders {
			info.Holders[i] = Holder{Owner: h.Owner, Token: h.Token, TTL: h.TTL, Writer: h.Kind == driver.Write, Metadata: h.Metadata}
		}
	}
	return info
}

// Inspect reports who holds the lock called name (at most one holder), for
// how long, and how many wait in line. It changes nothing.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	di, err := c.lockClient().inspect(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return infoOf(di), nil
}

// lockClient returns c as it asks for exclusive locks.
func (c *Client) lockClient() *Client {
	if c == nil || c.kind == driver.Exclusive {
		return c
	}
	cc := *c
	cc.kind, cc.limit, cc.place = driver.Exclusive, 0, 0
	return &cc
}

// shapeClient returns a copy of c that asks for kind (and a semaphore's
// limit n), for Semaphore and RWLock; name is the semaphore's, for the
// refusal of a bad n.
func (c *Client) shapeClient(name string, kind driver.Kind, n int) (*Client, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if kind == driver.Semaphore && driver.ValidateLimit(n) != nil {
		return nil, driver.Invalid("semaphore %q of %d permits: a semaphore has 1 to %d", name, n, driver.MaxPermits)
	}
	cc := *c
	cc.kind, cc.limit = kind, n
	return &cc, nil
}
