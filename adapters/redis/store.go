package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
)

var _ fence.Store = (*Store)(nil)

// StoreOptions configures a Store. The zero value (or nil) means the
// defaults.
type StoreOptions struct {
	// Prefix starts every key; DefaultPrefix when empty. The record of key
	// k is the hash "<prefix>:{k}" (braces and '%' %-escaped), with the
	// fields value and fence; a tombstone has the fence alone.
	Prefix string

	// WaitReplicas, when above zero, makes every Put, Delete and Advance
	// wait (WAIT) until that many replicas have acknowledged it, at most
	// WaitTimeout. Without it, a failover to a replica that had not yet
	// received a write rolls back the value and the fence, and a holder
	// whose token that write had fenced out is accepted again. If fewer
	// replicas acknowledge, the write returns an error matching
	// ErrReplication: its outcome is unknown (applied on the primary, may be
	// lost in a failover), never success and never fence.ErrStale;
	// repeating it with the same token is safe. Reads are not affected. It
	// needs a *goredis.Client or a *goredis.ClusterClient (including the
	// failover kinds).
	WaitReplicas int

	// WaitTimeout bounds the replication wait; DefaultWaitTimeout when zero.
	// It must stay below the client's ReadTimeout.
	WaitTimeout time.Duration
}

// Store is a fence.Store on Redis: every key is one hash holding the value
// and the fence, and every write is one script that compares the token with
// the fence and writes in the same atomic step. It is safe for concurrent
// use.
//
// Fences are stored as 19-digit zero-padded decimals and compared exactly
// over the whole range 1..fence.MaxToken (scripts/compare.lua: as doubles
// first, and as two halves of at most ten digits when the doubles tie).
type Store struct {
	client  Client
	prefix  string
	wait    replicationWait
	refused error          // why every call is refused (a Ring); nil when usable
	reload  *clusterReload // nil unless client is a cluster
}

// errRing refuses a Store on a *goredis.Ring.
var errRing = fence.Invalid("fencekit/redis: a Store cannot live on a *redis.Ring: " +
	"a Ring re-hashes keys over its live shards, so while a shard is down a record is looked up " +
	"on a shard that never saw its fence (any token is accepted), and when it comes back the writes " +
	"made meanwhile, acknowledged ones included, disappear; use a *redis.Client or a *redis.ClusterClient")

// NewStore returns a Store that keeps its records in client. opts may be nil.
//
// client must keep a key on one node for good: a *goredis.Client (a single
// server or a failover client) or a *goredis.ClusterClient. A Store made on
// a *goredis.Ring refuses every call with an error matching fence.ErrInvalid
// and sends nothing, as one made on a nil client does: a Ring moves keys
// between shards as shards come and go, and a fence that moves is no fence.
// (A Backend on a Ring is accepted: there a moved key costs only exclusion,
// which fencing covers.)
func NewStore(client Client, opts *StoreOptions) *Store {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	s := &Store{client: client, prefix: escapeKey(o.Prefix), wait: newReplicationWait(o.WaitReplicas, o.WaitTimeout), reload: newClusterReload(client)}
	if _, ring := client.(*goredis.Ring); ring {
		s.refused = errRing
	}
	return s
}

// Key is the Redis key of the hash that holds key's record.
func (s *Store) Key(key string) string {
	return s.prefix + ":{" + escapeKey(key) + "}"
}

// formatFence renders a token as the fixed-width string the scripts compare.
func formatFence(t fence.Token) string {
	var b [19]byte // MaxToken has 19 digits
	d := strconv.AppendInt(b[:0], int64(t), 10)
	pad := len(b) - len(d)
	copy(b[pad:], d) // copy handles the overlap
	for i := 0; i < pad; i++ {
		b[i] = '0'
	}
	return string(b[:])
}

// parseFence reads a stored fence; leading zeros are allowed.
func parseFence(s string) (fence.Token, error) {
	t, err := strconv.ParseInt(s, 10, 64)
	if err != nil || t < 0 {
		return 0, fmt.Errorf("fencekit/redis: malformed fence %q", s)
	}
	return fence.Token(t), nil
}

// Put writes value under key if token is at least the key's fence, and
// raises the fence to token. Otherwise it returns a *fence.StaleError and
// changes nothing. A nil value is stored as an empty one.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return s.write(ctx, "put", putScript, key, token, value)
}

// Delete removes key's value if token is at least its fence, keeping the
// fence as a tombstone so that an older token can never re-create the key.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "delete", deleteScript, key, token)
}

// Advance raises key's fence to token if token is at least the fence,
// without touching the value: every holder with an older token is refused
// from now on.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "advance", advanceScript, key, token)
}

// write runs one of the fenced write scripts: one round trip, one key.
func (s *Store) write(ctx context.Context, op string, script *script, key string, token fence.Token, extra ...any) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	args := make([]any, 0, 1+len(extra))
	args = append(append(args, formatFence(token)), extra...)
	keys := []string{s.Key(key)}
	var res waited
	if s.wait.on() {
		var err error
		if res, err = s.wait.run(ctx, s.client, script, sendOnce, keys, args); err != nil {
			s.reload.after(err)
			return opError(op, key, err)
		}
	} else {
		res.script = script.run(ctx, s.client, sendOnce, keys, args...)
	}
	reply, err := res.script.Result()
	if err != nil {
		// Not resent (a write is sent once): the reload only points the
		// caller's next call at the node that now owns the slot.
		s.reload.after(err)
		return opError(op, key, err)
	}
	switch r := reply.(type) {
	case int64: // 1: applied
		if r != 1 {
			break
		}
		if s.wait.on() {
			return s.acknowledged(op, key, res.wait)
		}
		return nil
	case []any: // {'stale', fence}: refused
		if len(r) == 2 && r[0] == "stale" {
			if cur, ok := r[1].(string); ok {
				f, err := parseFence(cur)
				if err != nil {
					return err
				}
				return fence.Stale(key, token, f)
			}
		}
	}
	return fmt.Errorf("fencekit/redis: %s %q: unexpected reply %v", op, key, reply)
}

// acknowledged checks the replication wait after an applied write.
func (s *Store) acknowledged(op, key string, wait *goredis.IntCmd) error {
	e := &ReplicationError{Op: op, Name: key, Want: s.wait.replicas, Got: -1, Timeout: s.wait.timeout}
	got, err := wait.Result()
	switch {
	case err != nil:
		e.Err = err
	case got < int64(s.wait.replicas):
		e.Got = int(got)
	default:
		return nil
	}
	return e
}

// Get returns key's value and fence with one HMGET. When the key holds no
// value (never written, deleted, or only advanced) the error matches
// fence.ErrNotFound and the Record still carries the fence.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	if err := s.ready(ctx); err != nil {
		return fence.Record{}, err
	}
	cmd := goredis.NewSliceCmd(ctx, "hmget", s.Key(key), "value", "fence")
	cmd.SetFirstKeyPos(1)
	if err := bounded(ctx, func() { _ = s.client.Process(ctx, cmd) }); err != nil {
		return fence.Record{}, opError("get", key, err)
	}
	vals, err := cmd.Result()
	if err != nil {
		s.reload.after(err)
		return fence.Record{}, opError("get", key, err)
	}
	if len(vals) != 2 {
		return fence.Record{}, fmt.Errorf("fencekit/redis: get %q: unexpected reply %v", key, vals)
	}
	var rec fence.Record
	if f, ok := vals[1].(string); ok {
		if rec.Fence, err = parseFence(f); err != nil {
			return fence.Record{}, err
		}
	}
	v, ok := vals[0].(string)
	if !ok {
		return rec, fmt.Errorf("%w: %q", fence.ErrNotFound, key)
	}
	rec.Value = append([]byte{}, v...) // non-nil even when empty
	return rec, nil
}
