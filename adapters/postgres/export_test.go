package postgres

import "time"

// WrapErrForTest exposes wrapErr, the one place where driver errors are
// classified, to the tests.
var WrapErrForTest = wrapErr

// SetListenLingerForTest shortens how long b's listening connection
// outlives its last waiter.
func SetListenLingerForTest(b *Backend, d time.Duration) { b.waker.linger = d }

// ListeningForTest reports whether b has a listening connection open.
func ListeningForTest(b *Backend) bool {
	b.waker.mu.Lock()
	defer b.waker.mu.Unlock()
	return b.waker.listening
}

// ListenerPIDForTest returns the server process of b's listening
// connection (0 before the first).
func ListenerPIDForTest(b *Backend) uint32 {
	b.waker.mu.Lock()
	defer b.waker.mu.Unlock()
	return b.waker.pid
}
