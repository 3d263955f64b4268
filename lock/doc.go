// Package lock is a distributed lock whose every acquisition mints a fencing
// token.
//
// A Client drives any Backend (adapters/memory, adapters/redis,
// adapters/postgres, or your own). Client.Acquire waits in line on a backend
// with queued waiting (QueueBackend: served in arrival order, woken by the
// release), and elsewhere retries with exponential backoff and full jitter,
// until the context ends, an attempt limit is reached, or the backend has
// given no answer for Options.MaxUnreachable (a minute by default; waiting
// for a holder is not limited by it); Client.TryAcquire makes one attempt;
// Client.Do acquires, keeps the
// lease alive, runs a function with a context that is cancelled if the lease
// is lost, and releases afterwards; Client.TryDo does the same only if the
// lock is free now. Per-call options (WithMaxAttempts, WithMaxUnreachable,
// WithKeepAlive, WithKeepAliveInterval) override the Client's Options for one call, so one
// Client serves blocking and try-once work alike. WithLease derives a
// context that ends with the caller's context or the lease, whichever ends
// first.
//
// Besides one name with one holder, a Client takes several names at once
// (AcquireMulti, DoMulti: all or nothing, a token per name), resumes a live
// lease by its owner value (Resume), and, over a backend with the optional
// PermitBackend, hands out permits of a Semaphore (up to N holders) and of an
// RWLock (many readers or one writer). A permit is a Lease like any other.
//
// A Lease carries its fencing token. Pass it with every protected write to a
// fence.Store (or use Lease.Fenced): the store refuses writes from a holder
// whose lease has silently expired, which the lock alone can never prevent.
//
// A Lease also keeps a local deadline, measured on the monotonic clock from
// before the acquire request was sent, minus a drift margin. When the
// deadline passes without a successful renewal, the backend says the lease
// is gone, or a renewal fails permanently, the lease is lost: Done is closed
// and its Context is cancelled with ErrLost as the cause.
//
// Only ErrHeld and transient failures are retried (see Retryable); any
// other error fails fast with its cause. Renewals and releases return by
// their context's deadline even if the backend does not.
package lock
