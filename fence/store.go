package fence

import (
	"context"
	"strings"
	"unicode/utf8"
)

// Store is a fenced resource: a key-value store that keeps, per key, the
// highest token it has accepted and refuses writes with older tokens. The
// package documentation states the obligations every implementation must meet.
//
// Types that satisfy Store in this module: *memory.Store, *redis.Store and
// *postgres.Store.
type Store interface {
	// Put writes value under key if token >= the key's fence, and raises
	// the fence to token. Otherwise it returns a *StaleError. The store
	// keeps no reference to value.
	Put(ctx context.Context, key string, token Token, value []byte) error

	// Get returns the key's value and fence, or an error matching
	// ErrNotFound (with the Record's Fence still set) when it holds no value.
	// The returned Value is the caller's to modify.
	Get(ctx context.Context, key string) (Record, error)

	// Delete removes the value under the rule of Put, keeping the fence as a
	// tombstone.
	Delete(ctx context.Context, key string, token Token) error

	// Advance raises the key's fence to token under the rule of Put, without
	// touching the value.
	Advance(ctx context.Context, key string, token Token) error
}

// Record is what a Store holds for one key.
type Record struct {
	// Value is the stored value; nil when the key holds no value.
	Value []byte
	// Fence is the highest token the key has accepted; 0 if none.
	Fence Token
}

// ValidateWrite checks the arguments of Put, Delete and Advance. It returns
// an error matching ErrInvalid for an empty key or an invalid token.
func ValidateWrite(key string, token Token) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if !token.Valid() {
		return Invalid("token %d is outside 1..%d", token, MaxToken)
	}
	return nil
}

// MaxKeyLen is the longest key, in bytes, that a Store must accept. It keeps
// keys within what every backend can index (PostgreSQL's B-tree entries, for
// one, are limited to about 2.7 kB).
const MaxKeyLen = 1024

// ValidateKey returns an error matching ErrInvalid unless key is a non-empty
// UTF-8 string of at most MaxKeyLen bytes without NUL bytes. Lock names obey
// the same rule.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return Invalid("empty key")
	case len(key) > MaxKeyLen:
		return Invalid("key of %d bytes is longer than %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return Invalid("key %q is not valid UTF-8", key)
	case strings.IndexByte(key, 0) >= 0:
		return Invalid("key %q contains a NUL byte", key)
	}
	return nil
}
