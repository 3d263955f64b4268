package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// DefaultCounterIdle is how long a lock's token counter survives without a
// new token being minted, when BackendOptions leaves CounterIdle at zero.
const DefaultCounterIdle = 7 * 24 * time.Hour

// BackendOptions configures a Backend. The zero value (or nil) means the
// defaults.
type BackendOptions struct {
	// Prefix starts every key; DefaultPrefix when empty. A lock named n
	// lives in "<prefix>:{n}:lease" and "<prefix>:{n}:counter", and its
	// waiters, while there are any, in "<prefix>:{n}:queue",
	// "<prefix>:{n}:places" and "<prefix>:{n}:queued" (a flag for the
	// release); waiters are woken on their Backend's channel
	// "<prefix>:wake:<random>"; a permit name (semaphore or read-write
	// lock) n lives in "<prefix>:{n}:permit:..." (Backend.PermitKeys).
	// Braces and '%' in the prefix and the name are %-escaped.
	Prefix string

	// CounterIdle is how long a lock's token counter is kept after the last
	// token was minted; DefaultCounterIdle (7 days) when zero, never expires
	// when negative. An expired counter costs nothing in correctness while
	// the server clock does not step back: the next token then comes from
	// the server's TIME in microseconds, which is above every earlier token.
	// It only stops locks that are used once from leaking a key each.
	CounterIdle time.Duration

	// WaitReplicas, when above zero, makes Acquire wait (WAIT) until that
	// many replicas have acknowledged the new lease, at most WaitTimeout. If
	// fewer do, the lease is released again and Acquire returns an error
	// matching ErrReplication (and driver.ErrTransient, so lock.Client
	// tries again). It needs a *goredis.Client or a *goredis.ClusterClient
	// (including the failover kinds).
	WaitReplicas int

	// WaitTimeout bounds the replication wait; DefaultWaitTimeout when zero.
	// It must stay below the client's ReadTimeout (5 s by default in
	// go-redis v9.23), which bounds the whole round trip.
	WaitTimeout time.Duration
}

// Backend is a lock driver (driver.Backend, driver.go) on Redis, for
// lock.New. It is safe for concurrent use.
type Backend struct {
	client      Client
	prefix      string
	counterIdle any // int64 milliseconds, 0: never expires; boxed once, not per call
	wait        replicationWait
	reload      *clusterReload // nil unless client is a cluster
	waker       *waker         // wake-ups for queued waiters (queue.go)
}

// NewBackend returns a Backend that keeps its leases in client. opts may be
// nil.
func NewBackend(client Client, opts *BackendOptions) *Backend {
	var o BackendOptions
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	idle := int64(0) // acquire.lua's "never expires"
	switch {
	case o.CounterIdle == 0:
		idle = millis(DefaultCounterIdle)
	case o.CounterIdle > 0:
		idle = millis(o.CounterIdle)
	}
	return &Backend{
		client:      client,
		prefix:      escapeKey(o.Prefix),
		counterIdle: idle,
		wait:        newReplicationWait(o.WaitReplicas, o.WaitTimeout),
		reload:      newClusterReload(client),
		waker:       newWaker(client, escapeKey(o.Prefix)),
	}
}

// LeaseKey is the key of the hash that holds name's lease (fields owner,
// token and metadata). It shares the hash tag of CounterKey.
func (b *Backend) LeaseKey(name string) string {
	return b.prefix + ":{" + escapeKey(name) + "}:lease"
}

// CounterKey is the key that holds the last token minted for name.
func (b *Backend) CounterKey(name string) string {
	return b.prefix + ":{" + escapeKey(name) + "}:counter"
}

// acquireLock takes name for owner for ttl and mints a new token, or, when
// owner already holds it, extends the lease to ttl and returns the same
// token. When another owner holds it the error is a *driver.HeldError with
// the remaining TTL. It is one script and one round trip; with WaitReplicas
// set, the script and WAIT travel together in one pipeline on one
// connection.
//
// The holder metadata md is stored in the lease hash, as a script argument,
// replacing what a same-owner acquire stored before; Extend keeps it and
// Release deletes it with the lease.
func (b *Backend) acquireLock(ctx context.Context, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	if err := b.ready(ctx); err != nil {
		return 0, err
	}
	keys := []string{b.LeaseKey(name), b.CounterKey(name)}
	args := []any{owner, millis(ttl), b.counterIdle, md}
	if b.wait.on() {
		return b.acquireWait(ctx, acquireScript, name, owner, keys, args)
	}
	reply, err := acquireScript.run(ctx, b.client, resend, keys, args...).Result()
	if err != nil {
		b.reload.after(err)
		return 0, acquireError(name, err)
	}
	return parseAcquire(name, reply)
}

// acquireError wraps a failed acquire script. INCR refusing to overflow means
// the counter reached fence.MaxToken: no token is left for this name.
func acquireError(name string, err error) error {
	if isRedisError(err) && strings.Contains(err.Error(), "increment or decrement would overflow") {
		return fmt.Errorf("fencekit/redis: acquire %q: no token above %d is left: %w", name, fence.MaxToken, err)
	}
	return opError("acquire", name, err)
}

// parseAcquire turns the acquire script's reply into a token or an error:
// a decimal string is the caller's token (new, or its own lease extended),
// an integer the remaining TTL of another owner's lease. The shape that
// earlier versions of the script replied, {status, token or pttl}, is read
// too (a table costs the server more to build and send, so the script no
// longer makes one).
func parseAcquire(name string, reply any) (fence.Token, error) {
	if r, ok := reply.([]any); ok && len(r) == 2 {
		switch r[0] {
		case "new", "mine":
			if _, ok := r[1].(string); ok {
				reply = r[1]
			}
		case "held":
			if _, ok := r[1].(int64); ok {
				reply = r[1]
			}
		}
	}
	switch r := reply.(type) {
	case string:
		t, err := strconv.ParseInt(r, 10, 64)
		if err == nil && fence.Token(t).Valid() {
			return fence.Token(t), nil
		}
	case int64:
		return 0, &driver.HeldError{Name: name, TTL: pttl(r)}
	}
	return 0, fmt.Errorf("fencekit/redis: acquire %q: unexpected reply %v", name, reply)
}

// extendLock renews owner's lease on name for ttl from now. It returns an
// error matching driver.ErrNotHeld, and changes nothing, when owner does
// not hold the lock; it never re-creates a lease.
func (b *Backend) extendLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	n, err := extendScript.run(ctx, b.client, resend, []string{b.LeaseKey(name)}, owner, millis(ttl)).Int64()
	if err != nil {
		b.reload.after(err)
		return opError("extend", name, err)
	}
	if n != 1 {
		return driver.NotHeld(name)
	}
	return nil
}

// releaseLock frees name if owner holds it (compare-and-delete), and wakes
// the first waiter in line. It returns an error matching driver.ErrNotHeld,
// and changes nothing, otherwise. The token counter is kept, so releasing
// never lowers the next token.
func (b *Backend) releaseLock(ctx context.Context, name, owner string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	return b.release(ctx, name, owner)
}

func (b *Backend) release(ctx context.Context, name, owner string) error {
	n, err := b.releaseAndWake(ctx, name, owner).Int64() // queue.go
	if err != nil {
		b.reload.after(err) // not resent: the caller's next call goes to the new map
		return opError("release", name, err)
	}
	if n != 1 {
		return driver.NotHeld(name)
	}
	return nil
}

// inspectLock reports the holder of name, its token, its remaining TTL and
// its metadata, and the number of live places in its line, read together
// by one script.
func (b *Backend) inspectLock(ctx context.Context, name string) (driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Info{}, err
	}
	reply, err := inspectScript.run(ctx, b.client, resend, []string{b.LeaseKey(name), b.PlacesKey(name)}).Slice()
	if err != nil {
		b.reload.after(err)
		return driver.Info{}, opError("inspect", name, err)
	}
	waiting, ok := int64(0), false
	if len(reply) == 1 || len(reply) == 5 {
		waiting, ok = reply[0].(int64)
	}
	info := driver.Info{Name: name, Kind: driver.Exclusive, Waiting: int(waiting)}
	if ok && len(reply) == 5 {
		owner, ok1 := reply[1].(string)
		tok, ok2 := reply[2].(string)
		ms, ok3 := reply[3].(int64)
		md, ok4 := reply[4].(string)
		t, perr := strconv.ParseInt(tok, 10, 64)
		ok = ok1 && ok2 && ok3 && ok4 && perr == nil
		info.Holders = []driver.Holder{{Owner: owner, Kind: driver.Exclusive, Token: fence.Token(t), TTL: pttl(ms), Metadata: md}}
	}
	if !ok {
		return driver.Info{}, fmt.Errorf("fencekit/redis: inspect %q: unexpected reply %v", name, reply)
	}
	return info, nil
}

// isNoScript reports whether err is the server's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}
