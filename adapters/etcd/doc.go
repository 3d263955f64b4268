// Package etcd is a consensus-backed driver.Backend (lock/driver) and
// fence.Store on etcd v3 (go.etcd.io/etcd/client/v3): a lock.Client over
// its Backend serves every lock shape (locks, queued waiting, sets, resume,
// semaphores and read-write locks).
//
// A lease lives in an etcd key attached to an etcd lease of its own, granted
// for the lock's TTL rounded up to whole seconds: the leader's lessor ends
// it, on the leader's monotonic clock, and deletes the key with it. The
// fencing token is the key's create revision: the cluster-wide revision of
// the transaction that took the lock. Revisions only grow, are replicated by
// Raft before any reply, survive a leader change, and continue after the
// whole cluster restarts from its data directories, so every new holder's
// token is above every earlier one, for every name.
//
// The package lives in a module of its own, so that etcd's dependency tree
// stays out of the core fencekit module. docs/etcd.md describes the key
// layout, each transaction, the TTL granularity, what a lost client does to
// a lease, and when to choose etcd over Redis or PostgreSQL.
package etcd
