package nats

import (
	"context"
	"fmt"
	"strconv"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencekit/fencekit/fence"
)

var _ fence.Store = (*Store)(nil)

// StoreOptions configures a Store. The zero value (or nil) means the
// defaults.
type StoreOptions struct {
	// Prefix starts every key: KV key tokens joined by '.', DefaultPrefix
	// when empty. The record of key k is the KV key
	// "<prefix>.fence.<base64url(k)>".
	Prefix string
}

// Store is a fence.Store on a JetStream KV bucket. Each key's record is one
// KV entry whose last message holds the value as its data and the fence in
// a header, so that the fence and the value change together and any write,
// one that only raises the fence included, gives the entry a new revision.
// A key with a fence but no value (deleted, or only advanced) is a KV
// delete marker that carries the fence.
//
// Every write reads the entry's last message from the stream's leader,
// compares the fence with the token as integers, and publishes the new
// message with the read revision as the expected last sequence of its
// subject: the leader refuses it if anything was written in between, and
// the write starts over. A write is two round trips when uncontended, and
// one for a Put or a Delete on a key whose last message this Store wrote
// or read (it remembers that message's revision and fence for up to 4096
// keys, and publishes at once expecting it; if the key moved on, the
// leader refuses and the write reads). It is safe for concurrent use.
type Store struct {
	b     *bucket
	cache revCache
}

// NewStore returns a Store that keeps its records in the KV bucket named
// bucket, which must exist (jetstream.JetStream.CreateKeyValue) and have no
// TTL and no size limit with discard-old, so that the server never drops a
// fence; otherwise the error matches ErrBucketConfig. Any history and
// replication factor will do. opts may be nil.
func NewStore(ctx context.Context, js jetstream.JetStream, bucket string, opts *StoreOptions) (*Store, error) {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	b, _, err := openBucket(ctx, js, bucket, o.Prefix)
	if err != nil {
		return nil, err
	}
	return &Store{b: b}, nil
}

// Key is the KV key that holds key's record.
func (s *Store) Key(key string) string { return s.b.key("fence", key) }

// Put writes value under key if token is at least the key's fence, and
// raises the fence to token. Otherwise it returns a *fence.StaleError and
// changes nothing. A nil value is stored as an empty one.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	return s.write(ctx, "put", key, token, true, func(*record) (natsgo.Header, []byte) {
		return natsgo.Header{}, value
	})
}

// Delete removes key's value if token is at least its fence, keeping the
// fence in a KV delete marker, so that an older token can never re-create
// the key.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "delete", key, token, true, func(*record) (natsgo.Header, []byte) {
		return natsgo.Header{kvOpHeader: []string{"DEL"}}, nil
	})
}

// Advance raises key's fence to token if token is at least the fence,
// keeping the value (or its absence): every holder with an older token is
// refused from now on.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "advance", key, token, false, func(cur *record) (natsgo.Header, []byte) {
		if cur == nil || cur.removed() {
			return natsgo.Header{kvOpHeader: []string{"DEL"}}, nil
		}
		return natsgo.Header{}, cur.data
	})
}

// write compares and writes until the write lands, the token is found
// stale, or ctx ends. next gives the new message from the current one
// (nil when the key has none); write adds the fence. When blind, next
// does not look at the current message, and a first attempt may publish
// at the revision the cache remembers without reading (see revCache).
func (s *Store) write(ctx context.Context, op, key string, token fence.Token, blind bool, next func(cur *record) (natsgo.Header, []byte)) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k := s.Key(key)
	for attempt := 0; ; attempt++ {
		var cur *record
		var after uint64
		if r, ok := s.cache.get(k); blind && attempt == 0 && ok && r.fence <= token {
			after = r.seq
		} else {
			var err error
			if cur, err = s.b.last(ctx, k); err != nil {
				s.cache.drop(k)
				return opError(ctx, op, key, err)
			}
			if cur != nil {
				after = cur.seq
				f, err := recordFence(cur)
				if err != nil {
					s.cache.drop(k)
					return fmt.Errorf("fencekit/nats: %s %q: %w", op, key, err)
				}
				s.cache.put(k, revision{seq: cur.seq, fence: f})
				if f > token {
					return fence.Stale(key, token, f)
				}
			}
		}
		h, data := next(cur)
		h.Set(fenceHeader, strconv.FormatInt(int64(token), 10))
		if data == nil {
			data = []byte{}
		}
		seq, err := s.b.write(ctx, k, after, h, data, 0)
		if err == nil {
			s.cache.put(k, revision{seq: seq, fence: token})
			return nil
		}
		s.cache.drop(k)
		if !isConflict(err) || ctx.Err() != nil {
			return opError(ctx, op, key, err)
		}
		// Another write landed since the revision this one expected:
		// nothing was written; compare again with what is there now.
	}
}

// recordFence reads a record's fence. A server limit marker means the
// server removed the record: the bucket was given a TTL after NewStore
// checked it, and the fence is lost.
func recordFence(r *record) (fence.Token, error) {
	v := r.header.Get(fenceHeader)
	if v == "" {
		if r.header.Get(markerHeader) != "" {
			return 0, fmt.Errorf("%w: the server removed the record (%s): its fence is lost", ErrMalformedRecord, r.header.Get(markerHeader))
		}
		return 0, fmt.Errorf("%w: revision %d has no %s header", ErrMalformedRecord, r.seq, fenceHeader)
	}
	n, ok := parseToken(v)
	if !ok {
		return 0, fmt.Errorf("%w: revision %d has fence %q", ErrMalformedRecord, r.seq, v)
	}
	return fence.Token(n), nil
}

// Get returns key's value and fence, read together from one message on the
// stream's leader. When the key holds no value (never written, deleted, or
// only advanced) the error matches fence.ErrNotFound and the Record still
// carries the fence.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return fence.Record{}, err
	}
	k := s.Key(key)
	cur, err := s.b.last(ctx, k)
	if err != nil {
		return fence.Record{}, opError(ctx, "get", key, err)
	}
	if cur == nil {
		return fence.Record{}, fmt.Errorf("%w: %q", fence.ErrNotFound, key)
	}
	f, err := recordFence(cur)
	if err != nil {
		return fence.Record{}, fmt.Errorf("fencekit/nats: get %q: %w", key, err)
	}
	s.cache.put(k, revision{seq: cur.seq, fence: f})
	rec := fence.Record{Fence: f}
	if cur.removed() {
		return rec, fmt.Errorf("%w: %q", fence.ErrNotFound, key)
	}
	rec.Value = append([]byte{}, cur.data...) // non-nil even when empty
	return rec, nil
}
