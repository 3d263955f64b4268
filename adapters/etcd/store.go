package etcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencekit/fencekit/fence"
)

var _ fence.Store = (*Store)(nil)

// TxnClient is the part of *clientv3.Client that a Store uses: one Txn per
// call. clientv3.KV (namespace.NewKV included) satisfies it too.
type TxnClient interface {
	Txn(ctx context.Context) clientv3.Txn
}

var _ TxnClient = clientv3.KV(nil)

// StoreOptions configures a Store. The zero value (or nil) means the
// defaults.
type StoreOptions struct {
	// Prefix starts every key, as it is; DefaultPrefix when empty. The
	// record of key k is "<prefix>fence/<k>" (its fence, 19 zero-padded
	// digits) and "<prefix>value/<k>" (its value, absent in a tombstone),
	// with '%' and '/' in k %-escaped.
	Prefix string
}

// Store is a fence.Store on etcd. Every call is one Txn: a write compares
// the stored fence with the token and writes the fence and the value in the
// same transaction, so the check and the write are one step of the Raft log.
// It is safe for concurrent use.
//
// Fences are stored as 19-digit zero-padded decimals, which an etcd Compare
// on a value orders as bytes exactly as the numbers are ordered, over the
// whole range 1..fence.MaxToken.
type Store struct {
	client TxnClient
	prefix string
}

// NewStore returns a Store that keeps its records in client, normally a
// *clientv3.Client. opts may be nil.
func NewStore(client TxnClient, opts *StoreOptions) *Store {
	var o StoreOptions
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	return &Store{client: client, prefix: o.Prefix}
}

// FenceKey is the key that holds key's fence.
func (s *Store) FenceKey(key string) string { return s.prefix + "fence/" + escapeKey(key) }

// ValueKey is the key that holds key's value.
func (s *Store) ValueKey(key string) string { return s.prefix + "value/" + escapeKey(key) }

// Put writes value under key if token is at least the key's fence, and
// raises the fence to token. Otherwise it returns a *fence.StaleError and
// changes nothing. A nil value is stored as an empty one.
func (s *Store) Put(ctx context.Context, key string, token fence.Token, value []byte) error {
	return s.write(ctx, "put", key, token, clientv3.OpPut(s.ValueKey(key), string(value)))
}

// Delete removes key's value if token is at least its fence, keeping the
// fence as a tombstone so that an older token can never re-create the key.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "delete", key, token, clientv3.OpDelete(s.ValueKey(key)))
}

// Advance raises key's fence to token if token is at least the fence,
// without touching the value: every holder with an older token is refused
// from now on.
func (s *Store) Advance(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "advance", key, token)
}

// write is one Txn: if the stored fence is above token, read it (stale);
// otherwise store token as the fence and apply ops. A key never written has
// no fence key, and an etcd Compare on a missing key's value is false, so
// the write goes ahead.
func (s *Store) write(ctx context.Context, op, key string, token fence.Token, ops ...clientv3.Op) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fk := s.FenceKey(key)
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(fk), ">", padFence(token))).
		Then(clientv3.OpGet(fk)).
		Else(append([]clientv3.Op{clientv3.OpPut(fk, padFence(token))}, ops...)...).
		Commit()
	if err != nil {
		return opError(ctx, op, key, err)
	}
	if !resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 {
		if cur, ok := parseFence(kvs[0].Value); ok {
			return fence.Stale(key, token, cur)
		}
	}
	return fmt.Errorf("fencekit/etcd: %s %q: malformed fence record %v", op, key, kvs)
}

// Get returns key's value and fence, read together in one Txn. When the key
// holds no value (never written, deleted, or only advanced) the error
// matches fence.ErrNotFound and the Record still carries the fence.
func (s *Store) Get(ctx context.Context, key string) (fence.Record, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return fence.Record{}, err
	}
	resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(s.ValueKey(key)), clientv3.OpGet(s.FenceKey(key))).Commit()
	if err != nil {
		return fence.Record{}, opError(ctx, "get", key, err)
	}
	var rec fence.Record
	if f := resp.Responses[1].GetResponseRange().Kvs; len(f) == 1 {
		cur, ok := parseFence(f[0].Value)
		if !ok {
			return fence.Record{}, fmt.Errorf("fencekit/etcd: get %q: malformed fence %q", key, f[0].Value)
		}
		rec.Fence = cur
	}
	v := resp.Responses[0].GetResponseRange().Kvs
	if len(v) == 0 {
		return rec, fmt.Errorf("%w: %q", fence.ErrNotFound, key)
	}
	rec.Value = append([]byte{}, v[0].Value...) // non-nil even when empty
	return rec, nil
}
