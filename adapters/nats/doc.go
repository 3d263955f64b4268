// Package nats is a driver.Backend (lock/driver) and a fence.Store on NATS
// JetStream key-value buckets (github.com/nats-io/nats.go/jetstream): a
// lock.Client over its Backend serves every lock shape (locks, queued
// waiting, sets taken name by name, resume, semaphores and read-write
// locks).
//
// A lease is a KV entry that the server expires on its own clock through a
// per-key TTL (nats-server 2.11 or later, a bucket with LimitMarkerTTL). Its
// fencing token is the revision (stream sequence) of the message that took
// the lock: sequences are issued by the bucket stream's leader, replicated
// by Raft and only grow, so each new holder's token is above every revision
// issued before in the bucket. A Store keeps each key's fence in a header of
// the same message as its value and writes by compare-and-set on the
// revision.
//
// A waiter's place in a lock's line is a KV key with a per-key TTL of its
// own, places are served by arrival revision, and waiters are woken through
// core NATS subscriptions to the removal of the lock key or of the place
// ahead (queue.go, docs/nats.md "Queued waiting").
//
// For semaphores and read-write locks, a permit name's whole state (shape,
// permits, line, last writer) is one KV key written by compare-and-set on
// its revision, a permit's token is the revision of the message that grants
// it, expiries are times on the stream leader's clock bounded from a
// sampled stream info reply, and waiters are woken by a core NATS
// subscription to the key (permit.go, docs/nats.md "Semaphores and
// read-write locks").
//
// NATS KV has no transaction over several keys, so the Backend cannot take
// a set of names in one step: it answers driver.ErrNotAtomic, and the
// Client takes the names one by one in sorted order.
//
// The package lives in a module of its own, so that nats.go stays out of the
// core fencekit module. docs/nats.md describes the key layout, the bucket
// settings, what holds under each fault and configuration, and the known
// NATS pitfalls with the tests that cover them.
package nats
