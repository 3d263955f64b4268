// Package nats is a lock.Backend and a fence.Store on NATS JetStream
// key-value buckets (github.com/nats-io/nats.go/jetstream).
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
// The Backend is also a lock.QueueBackend: a waiter's place in line is a KV
// key with a per-key TTL of its own, places are served by arrival revision,
// and waiters are woken through core NATS subscriptions to the removal of
// the lock key or of the place ahead (queue.go, docs/nats.md "Queued
// waiting").
//
// The package lives in a module of its own, so that nats.go stays out of the
// core fencekit module. docs/nats.md describes the key layout, the bucket
// settings, what holds under each fault and configuration, and the known
// NATS pitfalls with the tests that cover them.
package nats
