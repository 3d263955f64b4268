package fence

import "context"

// Store is a fenced resource: a key-value store that keeps, per key, the
// highest token it has accepted and refuses writes with older tokens. The
// package documentation states the obligations every implementation must meet.
//
// Types that satisfy Store in this module: *memory.Store, *redis.Store and
// *postgres.Store.
type Store interface {
	// Put writes value under key if token >= the key's fence, and raises
	// the fence to token. Otherwise it returns a *StaleError.
	Put(ctx context.Context, key string, token Token, value []byte) error

	// Get returns the key's value and fence, or an error matching
	// ErrNotFound (with the Record's Fence still set) when it holds no value.
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

// ValidateKey returns an error matching ErrInvalid for an empty key.
func ValidateKey(key string) error {
	if key == "" {
		return Invalid("empty key")
	}
	return nil
}
