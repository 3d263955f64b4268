package driver

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
)

// Limits on what a request may ask. The lock package refuses requests
// beyond them with ErrInvalid before a Backend sees them.
const (
	// MinTTL is the shortest lease: a shorter one cannot outlive one
	// round trip.
	MinTTL = time.Millisecond
	// MinPlaceTTL is the shortest place in line.
	MinPlaceTTL = 10 * time.Millisecond
	// MaxPermits is the most permits a semaphore has.
	MaxPermits = 1 << 16
	// MaxNames is the most names one set takes.
	MaxNames = 64
	// MaxMetadataLen is the longest holder metadata, in bytes.
	MaxMetadataLen = 1024
)

// ValidateName checks a lock or permit name: non-empty UTF-8 of at most
// fence.MaxKeyLen bytes, no NUL (the rule of fence.ValidateKey), so that every
// backend stores any name that any other accepts.
func ValidateName(name string) error {
	return validateKey("lock name", name)
}

// validateKey checks a name or owner by fence.ValidateKey's rule, saying
// what is wrong in the lock's words: what is "lock name" or "owner".
func validateKey(what, key string) error {
	switch {
	case key == "":
		return Invalid("empty %s", what)
	case len(key) > fence.MaxKeyLen:
		return Invalid("%s of %d bytes is longer than %d", what, len(key), fence.MaxKeyLen)
	case !utf8.ValidString(key):
		return Invalid("%s %q is not valid UTF-8", what, key)
	case strings.IndexByte(key, 0) >= 0:
		return Invalid("%s %q contains a NUL byte", what, key)
	}
	return nil
}

// ValidateClaim checks what Extend, Release, Await and Leave are given: a
// valid name and owner (the owner obeys the name's rule) and a known kind.
func ValidateClaim(c Claim) error {
	if err := ValidateName(c.Name); err != nil {
		return err
	}
	if err := validateKey("owner", c.Owner); err != nil {
		return err
	}
	if c.Kind < Exclusive || c.Kind > Write {
		return Invalid("unknown lock kind %d", c.Kind)
	}
	return nil
}

// ValidateTTL checks a lease's time to live.
func ValidateTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return Invalid("ttl %v is below the minimum %v", ttl, MinTTL)
	}
	return nil
}

// ValidateMetadata checks holder metadata: UTF-8 without NUL, at most
// MaxMetadataLen bytes; "" is valid and means none.
func ValidateMetadata(md string) error {
	switch {
	case len(md) > MaxMetadataLen:
		return Invalid("metadata of %d bytes is longer than %d", len(md), MaxMetadataLen)
	case !utf8.ValidString(md):
		return Invalid("metadata is not valid UTF-8")
	case strings.IndexByte(md, 0) >= 0:
		return Invalid("metadata contains a NUL byte")
	}
	return nil
}

// ValidateLimit checks a semaphore's number of permits.
func ValidateLimit(n int) error {
	if n < 1 || n > MaxPermits {
		return Invalid("a semaphore needs 1 to %d permits, not %d", MaxPermits, n)
	}
	return nil
}

// Validate checks a request as a whole: every name, the owner, the TTL, the
// kind and its limit, the place, the set, resume, and the metadata. The
// Client calls it before every Acquire; a Backend may assume it passed.
func Validate(req Request) error {
	if req.Names == nil {
		if err := ValidateClaim(Claim{Name: req.Name, Owner: req.Owner, Kind: req.Kind}); err != nil {
			return err
		}
	} else {
		if err := validateSet(req); err != nil {
			return err
		}
	}
	if err := ValidateTTL(req.TTL); err != nil {
		return err
	}
	switch req.Kind {
	case Semaphore:
		if err := ValidateLimit(req.Limit); err != nil {
			return err
		}
	default:
		if req.Limit != 0 {
			return Invalid("a %v lease takes no limit, got %d", req.Kind, req.Limit)
		}
	}
	if req.Place != 0 && req.Place < MinPlaceTTL {
		return Invalid("place ttl %v is below the minimum %v", req.Place, MinPlaceTTL)
	}
	if req.Resume && (req.Kind != Exclusive || req.Place != 0) {
		return Invalid("only an exclusive lease of one name is resumed, without a place")
	}
	return ValidateMetadata(req.Metadata)
}

// validateSet checks the names of a set request and what a set may not ask.
func validateSet(req Request) error {
	switch {
	case req.Name != "":
		return Invalid("a set of names takes no single name")
	case len(req.Names) == 0:
		return Invalid("empty set of lock names")
	case len(req.Names) > MaxNames:
		return Invalid("%d lock names in one set, above the maximum %d", len(req.Names), MaxNames)
	case req.Kind != Exclusive:
		return Invalid("a set of names takes exclusive locks, not %v permits", req.Kind)
	case req.Place != 0:
		return Invalid("a set of names does not wait in line")
	case req.Resume:
		return Invalid("a set of names cannot be resumed")
	}
	seen := make(map[string]struct{}, len(req.Names))
	for _, n := range req.Names {
		if err := ValidateClaim(Claim{Name: n, Owner: req.Owner, Kind: req.Kind}); err != nil {
			return err
		}
		if _, dup := seen[n]; dup {
			return Invalid("lock name %q appears twice in one set", n)
		}
		seen[n] = struct{}{}
	}
	return nil
}
