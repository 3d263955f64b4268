package nats

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// Granularity is the unit in which nats-server counts a per-message TTL:
// whole seconds (it truncates anything finer, and refuses less than one).
// A Backend rounds every lease's and place's TTL up to it rather than refuse
// one that is not whole seconds: a lease never ends before the TTL its
// caller asked for; it may last up to one Granularity longer (500 ms is held
// for 1 s, 1.5 s for 2 s), plus the server's expiry sweep. See Backend. A conformance run of a Backend
// declares it: drivertest.Run(t, newBackend, drivertest.TTLGranularity(Granularity)).
const Granularity = time.Second

// releaseMarkerTTL is how long the KV delete marker that a Release leaves
// lives before the server removes it, so that lock names used once do not
// leave a marker each behind for ever. Nothing depends on the marker: the
// next token comes from the stream's sequence, which never goes back.
const releaseMarkerTTL = time.Second

// BackendOptions configures a Backend. The zero value (or nil) means the
// defaults.
type BackendOptions struct {
	// Prefix starts every key: KV key tokens joined by '.', DefaultPrefix
	// when empty. The lease on lock n is the KV key
	// "<prefix>.lock.<base64url(n)>".
	Prefix string
}

// Backend is a driver.Backend on a JetStream KV bucket: a lock.Client over
// it serves every lock shape (see driver.go). A lease is one KV
// entry: its data is the owner (and the holder metadata), and every message
// that takes or renews it carries a per-message TTL (the Nats-TTL header,
// whole seconds), so the server removes the entry when the lease ends,
// whatever happens to the client: expiry is judged by the server's clock,
// never a client's.
//
// The server counts that TTL in whole seconds, so the Backend rounds every
// lease's TTL (and every place's in line) up to the next second
// (Granularity) instead of refusing one that is not whole seconds: a
// lock.Client asking for 500 ms gets a lease the server keeps for 1 s. The
// Client's local deadline (Lease.Deadline, Lease.Done) still follows the
// 500 ms asked for, so the holder stops in time; what the rounding changes
// is that another owner waits up to the whole second after a holder that
// stopped renewing, and that Inspect (Client.Inspect, Lease.TTL) reports the
// server's remaining TTL, which can be above the TTL asked for. Permits of
// semaphores and read-write locks are not per-key TTLs and keep the
// millisecond. TestSubSecondTTLIsHeldAWholeSecond pins this.
//
// The token is the stream sequence of the message that took the lock: the
// revision the entry got when it was created. Sequences are issued by the
// stream's leader, one per message in the whole bucket, and only grow, so a
// lock's new token is above every revision issued before in the bucket, its
// own earlier tokens included. Renewals write new messages (new revisions)
// that carry the token in a header.
//
// Every call reads the entry's last message from the stream's leader and
// writes with the read revision as the subject's expected last sequence, so
// the server refuses a write that something else overtook; the call then
// reads again. It is safe for concurrent use.
type Backend struct {
	b     *bucket
	cache leaseCache
	waker waker // queued waiting: see queue.go
	// Semaphores and read-write locks: see permit.go.
	clock       serverClock
	permitCache permitCache
	permitWaits permitWaker
}

// NewBackend returns a Backend that keeps its leases in the KV bucket named
// bucket. The bucket must exist and allow per-key TTLs (created with
// jetstream.KeyValueConfig.LimitMarkerTTL set, which needs nats-server 2.11
// or later); otherwise the error matches ErrNoKeyTTL. It must have no
// bucket TTL and no size limit with discard-old (ErrBucketConfig). opts may
// be nil.
func NewBackend(ctx context.Context, js jetstream.JetStream, bucket string, opts *BackendOptions) (*Backend, error) {
	var o BackendOptions
	if opts != nil {
		o = *opts
	}
	if js != nil {
		if v := js.Conn().ConnectedServerVersion(); v != "" && !serverHasKeyTTL(v) {
			return nil, fmt.Errorf("%w: the server is nats-server %s", ErrNoKeyTTL, v)
		}
	}
	b, cfg, err := openBucket(ctx, js, bucket, o.Prefix)
	if err != nil {
		return nil, err
	}
	if !cfg.AllowMsgTTL {
		return nil, fmt.Errorf("%w: bucket %q does not allow per-message TTLs", ErrNoKeyTTL, bucket)
	}
	return &Backend{b: b}, nil
}

// serverHasKeyTTL reports whether a nats-server of version v (as the server
// reports it, "2.11.0", "2.12.1-RC.2") has per-message TTLs.
func serverHasKeyTTL(v string) bool {
	parts := strings.SplitN(strings.SplitN(v, "-", 2)[0], ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 11
}

// Key is the KV key that holds the lease on name.
func (b *Backend) Key(name string) string { return b.b.key("lock", name) }

// keyTTL is ttl rounded up to whole seconds, the server's unit.
func keyTTL(ttl time.Duration) time.Duration {
	return (ttl + Granularity - 1) / Granularity * Granularity
}

// lease is a live lease as read from its entry's last message.
type lease struct {
	seq      uint64
	owner    string
	metadata string
	token    fence.Token
}

// readLease reads name's entry: nil when the lock is free.
func (b *Backend) readLease(ctx context.Context, key string) (*record, *lease, error) {
	cur, err := b.b.last(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	l, err := parseLease(cur)
	if err != nil {
		return nil, nil, err
	}
	return cur, l, nil
}

// parseLease reads the lease in a lock key's last message: nil when there
// is none (no message, or one that says the key was removed).
func parseLease(cur *record) (*lease, error) {
	if cur == nil || cur.removed() {
		return nil, nil
	}
	owner, md, _ := bytes.Cut(cur.data, []byte{0})
	l := &lease{seq: cur.seq, owner: string(owner), metadata: string(md), token: fence.Token(cur.seq)}
	if v := cur.header.Get(tokenHeader); v != "" {
		n, ok := parseToken(v)
		if !ok {
			return nil, fmt.Errorf("%w: revision %d has token %q", ErrMalformedRecord, cur.seq, v)
		}
		l.token = fence.Token(n)
	}
	if cur.header.Get(ttlHeader) == "" || len(owner) == 0 {
		return nil, fmt.Errorf("%w: revision %d is not a lease (no TTL or no owner)", ErrMalformedRecord, cur.seq)
	}
	if !l.token.Valid() {
		return nil, fmt.Errorf("%w: token %d is out of range", ErrMalformedRecord, l.token)
	}
	return l, nil
}

// leaseData is a lease message's data: the owner, then NUL and the holder
// metadata when there is any (neither may contain NUL).
func leaseData(owner, md string) []byte {
	if md == "" {
		return []byte(owner)
	}
	return []byte(owner + "\x00" + md)
}

// renewal is the header of a message that renews a lease: the token it
// keeps.
func renewal(tok fence.Token) natsgo.Header {
	return natsgo.Header{tokenHeader: []string{strconv.FormatInt(int64(tok), 10)}}
}

// acquireLock takes name for owner and returns the revision of the message
// that took it as the token, or, when owner already holds it, renews the
// lease to ttl (rounded up to whole seconds) and returns the same token.
// When another owner holds it, the error is a *driver.HeldError (with TTL
// 0: working it out would cost a round trip on every refused attempt).
//
// It is two round trips when uncontended: a read of the entry on the
// stream's leader, then a write that expects the read revision (0 when the
// entry is absent; a delete or limit marker's revision when one is there,
// which is where a plain KV Create would fail: nats-server#5162). The holder
// metadata md is written with the lease, replacing what a same-owner
// acquire stored before.
func (b *Backend) acquireLock(ctx context.Context, name, owner, md string, ttl time.Duration) (fence.Token, error) {
	k := b.Key(name)
	for attempt := 0; ; attempt++ {
		cur, l, err := b.lookup(ctx, k, owner, attempt)
		if err != nil {
			return 0, opError(ctx, "acquire", name, err)
		}
		switch {
		case l == nil:
			var after uint64
			if cur != nil {
				after = cur.seq
			}
			seq, err := b.b.write(ctx, k, after, nil, leaseData(owner, md), keyTTL(ttl))
			if err == nil {
				tok := fence.Token(seq)
				if !tok.Valid() {
					return 0, fmt.Errorf("fencekit/nats: acquire %q: revision %d exceeds the largest token", name, seq)
				}
				b.cache.put(k, lease{seq: seq, owner: owner, metadata: md, token: tok})
				return tok, nil
			}
			if !isConflict(err) || ctx.Err() != nil {
				return 0, opError(ctx, "acquire", name, err)
			}
		case l.owner != owner:
			return 0, &driver.HeldError{Name: name}
		default:
			seq, err := b.b.write(ctx, k, l.seq, renewal(l.token), leaseData(owner, md), keyTTL(ttl))
			if err == nil {
				b.cache.put(k, lease{seq: seq, owner: owner, metadata: md, token: l.token})
				return l.token, nil
			}
			if !isConflict(err) || ctx.Err() != nil {
				b.cache.drop(k)
				return 0, opError(ctx, "acquire", name, err)
			}
		}
		// The entry changed between the read and the write (nothing was
		// written): decide again on what is there now.
	}
}

// lookup returns owner's lease on key as this Backend last wrote or read
// it, on a first attempt when it has one (no round trip), and otherwise
// reads the key's last message from the stream's leader (see readLease).
// A write that expects the returned lease's revision fails as a conflict
// if the key changed since, and the next attempt reads.
func (b *Backend) lookup(ctx context.Context, key, owner string, attempt int) (*record, *lease, error) {
	if attempt == 0 {
		if l, ok := b.cache.get(key, owner); ok {
			return nil, &l, nil
		}
	}
	cur, l, err := b.readLease(ctx, key)
	switch {
	case err != nil || l == nil:
		b.cache.drop(key)
	default:
		b.cache.put(key, *l)
	}
	return cur, l, err
}

// extendLock renews owner's lease on name to ttl (rounded up to whole seconds)
// from now, keeping its token and metadata: a read, then a write that
// expects the read revision, which carries the TTL again. (A KV Update
// would drop it, and the renewed lease would never end: nats.go#1994.) A
// lease that has ended has no entry any more, or one of another owner, and
// the write expects the revision that was read, so a lost lease is never
// re-created.
func (b *Backend) extendLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	k := b.Key(name)
	for attempt := 0; ; attempt++ {
		_, l, err := b.lookup(ctx, k, owner, attempt)
		if err != nil {
			return opError(ctx, "extend", name, err)
		}
		if l == nil || l.owner != owner {
			return driver.NotHeld(name)
		}
		seq, err := b.b.write(ctx, k, l.seq, renewal(l.token), leaseData(owner, l.metadata), keyTTL(ttl))
		if err == nil {
			b.cache.put(k, lease{seq: seq, owner: owner, metadata: l.metadata, token: l.token})
			return nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			b.cache.drop(k)
			return opError(ctx, "extend", name, err)
		}
	}
}

// releaseLock ends owner's lease on name: a read, then a KV delete marker
// written with the read revision expected, so a lease that changed hands in
// between is left alone. The marker carries a TTL of its own (one second),
// so released names leave nothing behind.
func (b *Backend) releaseLock(ctx context.Context, name, owner string) error {
	k := b.Key(name)
	for attempt := 0; ; attempt++ {
		_, l, err := b.lookup(ctx, k, owner, attempt)
		if err != nil {
			return opError(ctx, "release", name, err)
		}
		if l == nil || l.owner != owner {
			return driver.NotHeld(name)
		}
		_, err = b.b.write(ctx, k, l.seq, natsgo.Header{kvOpHeader: []string{"DEL"}}, nil, releaseMarkerTTL)
		b.cache.drop(k) // released, unknown, or to be read again
		if err == nil {
			return nil
		}
		if !isConflict(err) || ctx.Err() != nil {
			return opError(ctx, "release", name, err)
		}
	}
}

// inspectLock reports the holder of name (its owner, token, metadata and
// remaining TTL) and the live places in its line, in two requests sent
// together: a multi-last read of the lock key and of every place in its
// queue (the direct get of lastMany, which any replica may answer), and a
// stream info request, which the stream's leader answers with its clock,
// its last revision and whether the lock key has a message. A read older
// than that revision (from a replica that had not applied every write
// acknowledged before the call) is asked again, up to maxStaleReads times,
// and the lock key is then read on the leader: the holder reported is
// never older than the call (the places counted are then the replica's).
// The remaining TTL is the lease message's time and TTL, both the
// server's, against the leader's clock. The server removes an entry on a
// one-second sweep after its TTL has passed, so a lease can still be held,
// and a place counted, for up to about a second after its TTL. The
// holder's own leftover place (see acquireInLine) is not counted; a line of
// more than 1024 places fails the read.
func (b *Backend) inspectLock(ctx context.Context, name string) (driver.Info, error) {
	lk := b.b.subject + b.Key(name)
	subjects := []string{lk, b.b.subject + b.QueueKey(name) + ".>"}
	var (
		leader streamInfo
		at     clockSample
		lerr   error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		leader, at, lerr = b.leaderInfo(ctx, lk)
	}()
	rs, upTo, err := b.b.lastManyOnce(ctx, subjects)
	<-done
	if err == nil {
		err = lerr
	}
	behind := func() bool { return readBehind(len(rs) > 0, upTo, leader, lk, b.b.written.Load()) }
	for i := 0; err == nil && i < maxStaleReads && behind(); i++ {
		rs, upTo, err = b.b.lastManyOnce(ctx, subjects)
	}
	if err != nil {
		return driver.Info{}, opError(ctx, "inspect", name, err)
	}
	var cur *record
	var places []*record
	for _, r := range rs {
		switch {
		case r.subject == lk:
			cur = r.rec
		case !r.rec.removed():
			places = append(places, r.rec)
		}
	}
	if behind() {
		if cur, err = b.b.last(ctx, b.Key(name)); err != nil {
			return driver.Info{}, opError(ctx, "inspect", name, err)
		}
	}
	l, err := parseLease(cur)
	if err != nil {
		return driver.Info{}, fmt.Errorf("fencekit/nats: inspect %q: %w", name, err)
	}
	info := driver.Info{Name: name, Kind: driver.Exclusive}
	for _, p := range places {
		if l == nil || string(p.data) != l.owner {
			info.Waiting++
		}
	}
	if l == nil {
		return info, nil
	}
	ttl, err := parseMsgTTL(cur.header.Get(ttlHeader))
	if err != nil {
		return driver.Info{}, fmt.Errorf("fencekit/nats: inspect %q: %w", name, err)
	}
	info.Holders = []driver.Holder{{
		Owner: l.owner, Kind: driver.Exclusive, Token: l.token, Metadata: l.metadata,
		TTL: max(cur.time.Add(ttl).Sub(time.Unix(0, at.server)), time.Millisecond),
	}}
	return info, nil
}

// readBehind reports whether a multi-last read of the lock subject lk and
// its line, which matched something (matched) as of revision upTo, is older
// than the leader's state in leader (a stream info filtered on lk) or than
// this bucket's own acknowledged writes (written): then it may miss a write
// acknowledged before the call. A read that matched nothing has no
// revision to judge by: it is behind when the leader has a message on lk.
func readBehind(matched bool, upTo uint64, leader streamInfo, lk string, written uint64) bool {
	if !matched {
		return leader.State.Subjects[lk] > 0
	}
	return upTo < max(leader.State.LastSeq, written)
}

// serverNow is the time on the clock of the stream's leader, from a stream
// info request.
func (b *Backend) serverNow(ctx context.Context) (time.Time, error) {
	_, s, err := b.leaderInfo(ctx, "")
	return time.Unix(0, s.server), err
}

// parseMsgTTL reads a Nats-TTL header as the server does: a Go duration
// ("5s") or a number of seconds.
func parseMsgTTL(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d.Truncate(time.Second), nil
	}
	n, ok := parseToken(v)
	if !ok {
		return 0, fmt.Errorf("%w: TTL header %q", ErrMalformedRecord, v)
	}
	return time.Duration(n) * time.Second, nil
}
