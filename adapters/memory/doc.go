// Package memory is an in-process lock Backend and fenced Store with the same
// semantics as the networked adapters. It serves unit tests, the fencelab
// demo, and programs whose lock only needs to span goroutines.
//
// Both types are safe for concurrent use; each operation is one critical
// section under a mutex, so every check and its write are atomic. The
// Backend is the reference implementation of the driver contract
// (lock/driver): every shape, with a FIFO line per name whose waiters are
// woken through a channel when a release lets them in. docs/driver.md walks
// through it.
package memory
