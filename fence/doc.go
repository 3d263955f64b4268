// Package fence defines fencing tokens and the Store contract: a resource that
// refuses a write carrying an older token than one it has already accepted, in
// the same atomic step as the write.
//
// A lock lease can always expire while its holder is paused (a GC stop, a slow
// call, a frozen VM). The holder wakes up believing it still holds the lock and
// writes. Fencing makes that write harmless: every acquisition of a lock mints a
// Token that only goes up, the holder passes it with every write, and the Store
// keeps, per key, the highest token it has accepted (the key's fence). A write
// whose token is below the fence is refused with an error that matches
// ErrStale, and nothing changes.
//
// # The Store contract
//
// Implementations of Store must meet these obligations; the package
// [github.com/fencekit/fencekit/fence/fencetest] checks every one of them.
//
//   - Put(key, token, value) must apply the write if and only if token is
//     greater than or equal to the key's fence, and then set the fence to
//     token. Equal is accepted on purpose: one holder writes many times during
//     its lease, and a write retried after an ambiguous timeout must succeed
//     again. Otherwise it must change nothing and return an error for which
//     errors.Is(err, ErrStale) is true and errors.As(err, **StaleError) yields
//     the key, the offered token and the current fence.
//   - Get(key) must return the value and the fence, or an error matching
//     ErrNotFound when the key holds no value (never written, deleted, or only
//     advanced). On such an error the returned Record still carries the
//     fence, so a caller can see a tombstone's height.
//   - Delete(key, token) follows the rule of Put but removes the value. The
//     fence must be kept (a tombstone), so that an older token can never
//     re-create the key.
//   - Advance(key, token) follows the rule of Put but writes nothing: it only
//     raises the fence, so that every older holder is refused from now on,
//     before the new holder has written anything. A read-modify-write under a
//     lock is Advance, then Get, then Put.
//   - The comparison and the write must be one atomic step at the resource
//     (one script, one statement or a row lock held to commit, one critical
//     section), and comparisons must be exact over the whole range
//     1..MaxToken.
//   - A key that ValidateKey refuses (empty, longer than MaxKeyLen, not
//     UTF-8, or with a NUL byte), or a token that is not Valid, must be
//     refused with an error matching ErrInvalid before anything is sent or
//     written. A nil
//     value is an empty value; Get returns it as a non-nil empty slice.
//   - Every method must honour its context: a call whose context is already
//     done must write nothing.
//   - An error matching ErrStale or ErrInvalid must mean that nothing
//     changed. Any other error (a timeout, a cut connection) leaves the
//     outcome unknown, and the caller may retry with the same token, which
//     is safe because equal tokens are accepted. So an implementation must
//     not resend a write on its own after the first send may have been
//     applied: if a newer holder wrote in between, the resend would be
//     refused as stale and the caller told "nothing changed" about a write
//     that landed.
//
// Implementations in this module: adapters/memory, adapters/redis and
// adapters/postgres.
package fence
