// Package redis is a fencekit lock Backend and fenced Store on Redis, over
// go-redis v9. Examples import it as fenceredis, next to go-redis itself:
//
//	import (
//		goredis "github.com/redis/go-redis/v9"
//		fenceredis "github.com/fencekit/fencekit/adapters/redis"
//	)
//
//	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
//	locks := lock.New(fenceredis.NewBackend(rdb, nil), nil)
//	store := fenceredis.NewStore(rdb, nil)
//
// Both types take any go-redis client that satisfies Client: a *Client
// (also what NewFailoverClient returns), a *ClusterClient (also what
// NewFailoverClusterClient returns), or a UniversalClient; a Backend also
// takes a *Ring, which a Store refuses (a Ring moves keys, and fences with
// them, between shards). Every call returns by its context's deadline, with
// go-redis's default options too.
//
// A Store on an asynchronously replicated Redis loses its newest writes, and
// their fences, in a failover unless StoreOptions.WaitReplicas makes each
// write wait for replicas.
//
// Every operation is one Lua script and one network round trip (Get is one
// HMGET). A lock's keys share the hash tag {name} and a Store record is one
// hash, so every script touches a single cluster slot and works on Redis
// Cluster. Tokens are minted as max(counter+1, server TIME in microseconds),
// which keeps them above every earlier token across a restart without
// persistence, a failover, or the counter's idle expiry, as long as the
// server clock does not step back. Tokens are compared exactly over the
// whole range 1..fence.MaxToken: as Lua doubles where those decide (always
// below 2^53), as two halves of at most ten digits, each exact, where they
// tie; no token above 2^53 is ever computed with a double.
//
// A Backend is a lock driver (lock/driver's Backend): lock.New takes it, and
// every lock shape of lock.Client runs over it through the driver's six
// methods (driver.go). Each call is one script and one round trip, but
// Await, which waits for a wake-up and sends nothing.
//
// Queued waiting, which lock.Client's Acquire and Do use: waiters line up in
// a sorted set per lock, their places expiring on the server's clock unless
// renewed, and a release wakes the first of them by PUBLISH on the channel
// of the Backend it queued through, which that Backend's one pub/sub
// connection receives (see Acquire with a Place, Await, and
// docs/patterns.md).
//
// Semaphores and read-write locks (lock.Client's Semaphore and RWLock): each
// permit operation is one script over the name's keys under
// "<prefix>:{name}:permit:" (see PermitKeys), apart from its lock keys, with
// expiries on the server's clock and wake-ups as for queued locks.
//
// A set of names (lock.Client's AcquireMulti) is one script on a single node
// or a Sentinel failover client, and on a Cluster when every name hashes to
// one slot; otherwise (other slots, a Ring, WaitReplicas) Acquire answers
// driver.ErrNotAtomic and the Client takes the names one by one.
//
// docs/redis.md describes the key layout, each script, the durability
// trade-offs and what the optional replication wait (WAIT) does and does not
// give.
package redis
