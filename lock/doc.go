// Package lock is a distributed lock whose every acquisition mints a fencing
// token.
//
// A Client runs over one backend: adapters/memory, adapters/redis,
// adapters/postgres, adapters/sqldb, adapters/etcd, adapters/nats,
// adapters/dynamodb, or a wrapper around one (fenceotel's tracing, your own metrics). Every backend
// shipped with fencekit serves every shape below.
//
//   - Locks: Client.Acquire waits in line (served in arrival order, woken by
//     the release) until the context ends, an attempt limit is reached, or
//     the backend has given no answer for Options.MaxUnreachable (a minute
//     by default; waiting for a holder is not limited by it);
//     Client.TryAcquire makes one attempt; Client.Do acquires, keeps the
//     lease alive, runs a function with a context that is cancelled if the
//     lease is lost, and releases afterwards; Client.TryDo does the same
//     only if the lock is free now.
//   - Sets: AcquireMulti and DoMulti take several names at once, all or
//     nothing, a token per name, and never hold one name while waiting for
//     another.
//   - Resume adopts a live lease by its owner value, keeping its token.
//   - Semaphore hands out up to N permits at once, RWLock many read permits
//     or one write permit; a permit is a Lease like any other.
//   - Election and Lead: leader election whose term is the lease's token.
//
// Per-call options (WithMaxAttempts, WithMaxUnreachable, WithKeepAlive,
// WithKeepAliveInterval) override the Client's Options for one call, so one
// Client serves blocking and try-once work alike. WithLease derives a
// context that ends with the caller's context or the lease, whichever ends
// first.
//
// A Lease carries its fencing token. Pass it with every protected write to a
// fence.Store (or use Lease.Fenced): the store refuses writes from a holder
// whose lease has silently expired, which the lock alone can never prevent.
//
// A Lease also keeps a local deadline, measured on the monotonic clock from
// before the acquire request was sent, minus a drift margin. When the
// deadline passes without a successful renewal, the backend says the lease
// is gone, or a renewal fails permanently, the lease is lost: Done is closed
// and its Context is cancelled with ErrLost as the cause. The keep-alive's
// renewals and the releases after a lost context run on a context that
// keeps the values (not the cancellation) of the one the lease was acquired
// with, so a tracer on your own client records them under your trace.
//
// Only ErrHeld and transient failures (a refused or reset connection, a
// timeout, a server that says "try again") are retried; any other error
// fails fast with its cause. Renewals and releases return by their
// context's deadline even if the backend does not. Bad input (a malformed
// name, a TTL the Options refuse, a semaphore of 0 permits) is refused with
// an error matching ErrInvalid before anything is sent; it reads
// "lock: invalid argument: ...". Client.Semaphore and Client.RWLock return
// no error: a bad name or number of permits is refused by each call on the
// value they return, Inspect included. A refusal by a holder (ErrHeld)
// names the shape: a lock, a semaphore and its number of permits, or a
// read-write lock.
//
// To write a backend, or a wrapper around one, see the package lock/driver
// and its suite lock/drivertest.
package lock
