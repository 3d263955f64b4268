package dynamodb

import "time"

// SetClock makes b read the time from now: tests give a Backend a clock
// that is off by a constant, as another machine's may be.
func SetClock(b *Backend, now func() time.Time) { b.now = now }
