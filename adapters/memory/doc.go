// Package memory is an in-process lock Backend and fenced Store with the same
// semantics as the networked adapters. It serves unit tests, the fencelab
// demo, and programs whose lock only needs to span goroutines.
//
// Both types are safe for concurrent use; each operation is one critical
// section under a mutex, so every check and its write are atomic. The
// Backend offers queued waiting (lock.QueueBackend): a FIFO per lock whose
// first waiter is woken through a channel when the lock is released.
package memory
