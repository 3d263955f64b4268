// Package driver is the contract between the lock package and a backend:
// what a backend must do so that a lock.Client can run every lock shape over
// it. Applications never import it; they hold a *lock.Client. Import it to
// write a backend, or a wrapper around one (tracing, metrics, a test double).
//
// # One interface, shapes as data
//
// Every backend implements Backend in full. There are no optional
// capabilities to discover: a lock, a semaphore, a read-write lock, a set of
// names, queued waiting and resuming a lease are all asked for through the
// same six methods, and a Request says which shape it wants (Kind, Limit),
// whether the caller waits in line (Place), whether it takes a set of names
// (Names) and whether it adopts a live lease (Resume). So a struct that
// embeds a Backend and overrides one method keeps every capability of what it
// wraps.
//
// The model is one line of waiters in front of a set of holders, per name;
// the shapes differ only in who is admitted:
//
//	Exclusive         no live holder, nobody ahead in line
//	Semaphore of N    live holders + places ahead < N
//	Read              no live Write holder, no Write place ahead
//	Write             no live holder, nobody ahead
//
// Exclusive locks and permits (Semaphore, Read, Write) live apart: a lock
// called "x" and a semaphore called "x" neither see nor block each other.
// A backend may keep them in separate scripts or tables; the contract is one.
//
// # What a backend may assume
//
// The lock package checks every request before it calls a Backend (Validate,
// ValidateClaim, ValidateName): names, owners, TTLs, kinds, limits, places,
// sets and metadata. A backend may assume that what it is given passes those
// checks, as a Go CDK driver may assume its options are non-nil. A backend
// that adds limits of its own (a key length, a character set, a TTL
// granularity) refuses what breaks them with an error matching ErrInvalid,
// before anything is sent.
//
// # Obligations
//
// The package lock/drivertest checks every obligation below, on any
// Backend, with a lock.Client over it (drivertest.Run).
//
// Tokens. Acquire must mint, in the same atomic step that admits the
// caller, a token greater than every token ever issued for that name, of any
// kind, and keep that true after the name is released, expires, is deleted,
// or the server restarts (a backend that can lose its state says so and ships
// a way to raise its counter). Tokens of lock names and of permit names are
// counted apart.
//
// Acquire, single name (Request.Names nil). Within one atomic step it must
// first drop every lease and place of the name whose expiry has passed.
//
//   - When Owner already holds a live lease of the name of the same kind, it
//     must extend it to TTL from now and return the same Grant (same Token,
//     same PriorWriter), replacing the stored metadata with Metadata, so that
//     an acquire retried after a lost reply does not lock its own caller out.
//     It must also drop Owner's place in line, if any.
//   - For a permit kind, when the name has a live permit or place and the
//     request asks for another shape (a semaphore of another Limit, a
//     read-write kind of a semaphore, or the other way round), or Owner holds
//     a permit of another kind, it must change nothing and return an error
//     matching ErrShapeMismatch (ShapeMismatch builds one).
//   - Otherwise, when the admission rule above admits Owner, with "ahead"
//     meaning the live places that arrived before Owner's (every live place
//     when Owner has none), it must store a lease for Owner that expires TTL
//     from now, mint its token, drop Owner's place, and return the token.
//     (A request without a place need not look for one: Owner's place, if
//     it has one from an earlier request with a place, may be kept, and
//     then goes by its expiry or Owner's Leave. The Client never sends a
//     request without a place while the owner may have one on the name: a
//     blocking acquire asks with its place until an admission in line drops
//     it, or leaves the line when it gives up.)
//     For a permit kind the Grant's PriorWriter is the token of the newest
//     Write permit granted on the name before this one (0 if none), and a
//     Write grant becomes the name's LastWriter.
//   - Otherwise, when Place > 0, it must keep Owner's place, or add one at the
//     tail when Owner has none (never two places for one owner), set it to
//     expire Place from now, and return a *HeldError naming the name (it
//     matches ErrHeld: the Client's in-order set and its wait in line read
//     the name). When Place is 0 it must change nothing and return one too.
//     Its TTL is the time until the earliest live holder expires, when
//     known (0 otherwise); when Owner has a place, it carries it only while
//     Owner is first in line, and 0 otherwise.
//   - Nobody jumps the line for permits: a request without a place counts
//     every live place as ahead of it. For Exclusive a request without a place
//     may take a free lock ahead of waiters (TryAcquire barges: the lock is
//     free only between a release and the first waiter's next call).
//   - When nobody waits, an Exclusive acquire with a Place costs what one
//     without costs.
//
// Acquire, resume (Request.Resume, Kind Exclusive, one name, Place 0). In
// one atomic step: if Owner holds a live lease on the name, it must renew
// it to TTL from now, keep its token and its metadata, and return the token
// of the lease it renewed (a resume that reads the token, then renews, may
// renew a lease its owner took anew in between and return the old one's
// token); otherwise return an
// error matching ErrNotHeld and change nothing: never create a lease, never
// mint a token, never touch another owner's lease. A resend after a lost
// reply returns the same token.
//
// Acquire, set (Request.Names, Kind Exclusive, Place 0). In one atomic step:
// when every name is free (or expired) or held by Owner, it must take each
// free one as a single-name acquire would (its own token), extend each one
// Owner holds keeping its token, store Metadata on each, and return
// Grant.Tokens in the order of Names. When any name is held by another owner
// it must change nothing at all and return an error matching ErrHeld (a
// *HeldError naming that name). No other caller may see a part of the set
// taken. When the backend cannot take this set in one step (names on
// different Redis Cluster slots, a store without multi-key transactions) it
// must change nothing and return an error matching ErrNotAtomic; the Client
// then takes the names one by one in sorted order, never holding a name while
// it waits for another: after a pass that fails it releases every name it
// may hold, and retries each release until the backend confirms it
// (released, or ErrNotHeld) or the lease it may have left has expired. So
// Release's ErrNotHeld must mean that the owner holds no lease of the name.
//
// Extend(claim, ttl). Only while claim.Owner holds a live lease of the name
// (for a permit kind: a live permit of any kind of that owner) it must renew
// it to ttl from now, keeping its token and metadata. It must never re-create
// a lease that expired or was released: then it returns an error matching
// ErrNotHeld and changes nothing.
//
// Release(claim). Compare and delete: it frees the owner's lease, or returns
// an error matching ErrNotHeld and changes nothing when the owner holds none
// (a double release, a release after expiry or takeover frees nothing: no
// other holder's lease, no slot of a semaphore). It
// never lowers the name's token counter. It must wake the waiters in line
// that the release lets in (waking every waiter of the name is allowed).
//
// Await(claim, max) blocks until the owner is woken, max has passed or ctx
// ends: nil in the first two cases (the Client then calls Acquire again),
// an error matching ctx.Err() in the third. It may return early. A wake-up
// sent after the owner's Acquire returned must not be lost, even if Await is
// called after it was sent. Leave, and an expired holder or place that lets
// a waiter in, should wake it too; a backend that cannot push those may
// leave them to the waiter's next renewal, which comes within a third of its
// place TTL.
//
// Leave(claim) removes the owner's place in the name's line and nothing
// else: never another owner's place, never a lease (a holder's Leave frees
// nothing); nil when it has none.
//
// Inspect(name, kind) reports the name as it is now: with kind Exclusive the
// lock called name, with any permit kind the permit name called name. Info
// lists the live holders, the number of live places in line and, for permit
// names, the shape and the last writer.
//
// Errors. A failure that a retry of the same call may cure (the server
// unreachable, busy, loading, failing over, a serialization conflict) must
// be an error for which Retryable is true: a net.Error, or an error wrapped
// with Transient. Any other error is permanent: the Client returns it at once
// instead of retrying, and a permanent error from Extend loses the lease.
// Every method must honour its context. A backend that truly cannot offer a
// shape (a third-party store without a way to queue, say) returns an error
// matching ErrUnsupported from Acquire for it, and changes nothing; the
// Client returns that error to the caller and never falls back.
package driver
