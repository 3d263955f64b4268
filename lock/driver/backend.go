package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/fencekit/fencekit/fence"
)

// Backend is where leases and places in line live. The package doc lists
// its obligations; lock/drivertest checks them.
//
// Types that implement Backend: *memory.Backend (adapters/memory, the
// reference implementation), *redis.Backend, *postgres.Backend,
// *sqldb.Backend, and, in modules of their own, *etcd.Backend,
// *nats.Backend and *dynamodb.Backend.
type Backend interface {
	// Acquire admits req.Owner to the name (or every name of req.Names)
	// as req asks, minting a token, or keeps the owner's place in line
	// when req.Place > 0. Not admitted, it returns an error matching
	// ErrHeld.
	Acquire(ctx context.Context, req Request) (Grant, error)
	// Extend renews the claimed lease to ttl from now.
	Extend(ctx context.Context, claim Claim, ttl time.Duration) error
	// Release gives up the claimed lease and wakes the waiters it lets in.
	Release(ctx context.Context, claim Claim) error
	// Await blocks until the claim's owner is woken in line, at most max.
	Await(ctx context.Context, claim Claim, max time.Duration) error
	// Leave gives up the claim's owner's place in line.
	Leave(ctx context.Context, claim Claim) error
	// Inspect reports the name's holders and line: the lock called name
	// when kind is Exclusive, the permit name called name otherwise.
	Inspect(ctx context.Context, name string, kind Kind) (Info, error)
}

// Kind is what a lease lets its holder do, and so which admission rule
// applies to it. Exclusive is a lock's single holder; the other kinds are
// permits, which live on permit names apart from locks.
type Kind uint8

const (
	// Exclusive is a lock: one holder at a time.
	Exclusive Kind = iota + 1
	// Semaphore is one of a semaphore's Limit permits.
	Semaphore
	// Read is a read-write lock's shared permit: any number of readers
	// hold one together, and none while a writer does.
	Read
	// Write is a read-write lock's exclusive permit.
	Write
)

// String names the kind as the docs and fencectl do.
func (k Kind) String() string {
	switch k {
	case Exclusive:
		return "exclusive"
	case Semaphore:
		return "semaphore"
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Permit reports whether k is one of the permit kinds.
func (k Kind) Permit() bool { return k == Semaphore || k == Read || k == Write }

// Request is what Acquire is asked for. Validate checks it; the Client
// calls Validate before every Acquire.
type Request struct {
	// Name is the lock or permit name. Empty when Names is set.
	Name string
	// Names, when not nil, asks for a set of lock names at once, all or
	// nothing (Kind Exclusive, Place 0, Resume false, Name empty), in no
	// particular order and without duplicates.
	Names []string
	// Owner is the caller's owner value, unique per lease.
	Owner string
	// TTL is the lease's time to live, at least MinTTL.
	TTL time.Duration
	// Kind says which admission rule applies.
	Kind Kind
	// Limit is a semaphore's number of permits, 1 to MaxPermits; 0 for
	// every other kind.
	Limit int
	// Place, when above zero, keeps the caller's place in line for that
	// long when it is not admitted (at least MinPlaceTTL, one name only);
	// 0 means do not wait in line.
	Place time.Duration
	// Resume asks to adopt Owner's live lease (Kind Exclusive, one name,
	// Place 0): renew it and return its token, never mint one.
	Resume bool
	// Metadata is what the holder says of itself ("host=... pid=..."),
	// stored with an Exclusive lease and reported by Inspect; "" for none.
	// At most MaxMetadataLen bytes of UTF-8 without NUL. Backends may
	// keep none for permits.
	Metadata string
}

// Grant is what an admitted Acquire returns.
type Grant struct {
	// Token is the lease's fencing token, for a single-name request.
	Token fence.Token
	// Tokens are a set's tokens, in the order of Request.Names; nil for a
	// single-name request.
	Tokens []fence.Token
	// PriorWriter is, for a permit, the token of the newest Write permit
	// granted on the name before this one; 0 if none, and for Exclusive.
	PriorWriter fence.Token
}

// Claim names the lease or the place in line that Extend, Release, Await
// and Leave are about: Owner's on Name, among locks when Kind is
// Exclusive and among permit names otherwise.
type Claim struct {
	Name  string
	Owner string
	Kind  Kind
}

// Info describes a lock or a permit name as its backend sees it.
type Info struct {
	Name string
	// Kind is Exclusive for a lock. For a permit name in use it is its
	// shape: Semaphore, or Write for a read-write lock; 0 when the permit
	// name is idle (no live permit, no live place).
	Kind Kind
	// Limit is a semaphore's number of permits; 0 otherwise.
	Limit int
	// Holders are the live leases, in no particular order: at most one
	// for a lock.
	Holders []Holder
	// Waiting is how many live places are in line.
	Waiting int
	// LastWriter is, for a permit name, the token of the newest Write
	// permit ever granted; 0 for a lock.
	LastWriter fence.Token
}

// Holder is one live lease.
type Holder struct {
	Owner string
	Kind  Kind
	Token fence.Token
	TTL   time.Duration // remaining time to live
	// Metadata is what the holder attached when it acquired (Request.Metadata);
	// "" when none, or when the backend keeps none for this kind.
	Metadata string
}
