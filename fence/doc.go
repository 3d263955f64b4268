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
// Implementations of Store must meet these obligations. The package
// [github.com/fencekit/fencekit/fence/fencetest] checks each of them from
// outside, as a black box, except where this list says otherwise; its
// Linearizable function checks a concurrent history against all of them at
// once. docs/conformance.md names the check behind each obligation.
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
//   - Delete(key, token) follows the rule of Put, equal token included, but
//     removes the value. The fence must be kept (a tombstone), also when
//     the key held no value, so that an older token can never re-create the
//     key.
//   - Advance(key, token) follows the rule of Put, equal token included, but
//     writes nothing: it only raises the fence, so that every older holder
//     is refused from now on, before the new holder has written anything. A
//     read-modify-write under a lock is Advance, then Get, then Put.
//   - The comparison and the write must be one atomic step at the resource
//     (one script, one statement or a row lock held to commit, one critical
//     section), for Put, Delete and Advance alike. fencetest races many
//     writers with interleaved tokens against one key, so that a store that
//     checks and then writes in two steps is caught by design; a race can
//     still only show a window that opens, so a narrow one (nanoseconds, in
//     process) may pass a single run.
//   - Comparisons must be exact over the whole range 1..MaxToken, in every
//     method and in whatever representation the store keeps the fence
//     (a float, a string, an integer of another width all break somewhere),
//     and Get must return the fence exactly.
//   - A key is a sequence of bytes, compared byte for byte: keys that differ
//     only by case, accents, white space (trailing spaces included) or
//     Unicode normalization (NFC against NFD) are different keys, and every
//     key that ValidateKey accepts, up to MaxKeyLen bytes, is stored whole.
//   - A key that ValidateKey refuses (empty, longer than MaxKeyLen, not
//     UTF-8, or with a NUL byte), or a token that is not Valid, must be
//     refused by every method (Get included, for keys) with an error
//     matching ErrInvalid before anything is sent or written.
//   - Values are bytes, stored and returned exactly (NUL bytes and 1 MiB
//     included). A nil value is an empty value; Get returns it as a non-nil
//     empty slice. The store keeps no reference to the slice passed to Put,
//     and the slice Get returns is the caller's to modify.
//   - Every method must honour its context. A call whose context is already
//     done must write nothing and return an error matching the context's
//     error. A call whose deadline passes while it runs must return soon
//     after (fencetest allows MidCallGrace), either having completed or
//     with an error matching context.DeadlineExceeded (or
//     os.ErrDeadlineExceeded, as Go's net package reports a dial or read cut
//     short by the deadline), never one that hides why. fencetest checks
//     this with deadlines that end before, during and after each call; that
//     a blocked call really is woken by its context can only be shown by a
//     test that can block the backend, such as the fault kit's.
//   - An error matching ErrStale or ErrInvalid must mean that nothing
//     changed. Any other error (a timeout, a cut connection) leaves the
//     outcome unknown, and the caller may retry with the same token, which
//     is safe because equal tokens are accepted. So an implementation must
//     not resend a write on its own after the first send may have been
//     applied: if a newer holder wrote in between, the resend would be
//     refused as stale and the caller told "nothing changed" about a write
//     that landed. No black-box check against a healthy server can see a
//     resend, since the first send never fails there; the fault kit of
//     fencetest checks it by losing replies between the store and its
//     server (see docs/conformance.md, "The fault kit").
//
// Implementations in this module: adapters/memory, adapters/redis and
// adapters/postgres.
package fence
