// Package dynamodb fences writes to DynamoDB and takes locks on it, over
// the aws-sdk-go-v2 client a service already has.
//
// Store is a fence.Store: one item per key, holding the key's fence and
// its value. Put, Delete and Advance are each one conditional request
// whose condition is the fencing rule (attribute_not_exists(f) OR f <= :t),
// so DynamoDB compares the token and writes in one atomic step. A value
// longer than InlineValueLen is written in immutable chunks before that one
// conditional request, which then names them. WriteFenced adds the fencing
// rule to a TransactWriteItems request of your own items.
//
// Backend is a lock backend (driver.Backend, for lock.New) that serves
// every lock shape: locks with queued waiting, semaphores, read-write
// locks, resume, and sets (taken name by name by the Client). Each lock
// name and each permit name is one item holding its holders and its line
// of waiters, a revision, and the name's token counter; every change is one
// UpdateItem conditional on the revision of the state it was decided on,
// and raises the counter in the same request. The Backend never trusts a clock: an entry has run out
// only once this Backend has watched it unchanged for its whole TTL, as the
// AWS DynamoDB lock client judges a lease. A contender whose clock is off
// by any constant never takes a live lease; the price is that a Backend
// new to a name waits one TTL before it takes over a lease it never saw
// renewed.
//
// Migrate makes a table with the one key schema both use (CreateTableInput
// gives it for your own tooling); a Store and a Backend may share it under
// different prefixes.
//
// docs/dynamodb.md in the repository has the recipe for a Go service, the
// item layout, the requests each call makes, and which paths the test
// server (dynalite) exercises and which it cannot.
//
// The package is named dynamodb, like the SDK's; import it under another
// name:
//
//	import fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
package dynamodb
