package lock

// Events of a lease are queued under the lease's lock in the order they
// happen, and handed to the Observer by one goroutine at a time, outside the
// lock. So the Observer may call back into the lease (Release from an
// EventLost raised by the keep-alive, say) without deadlocking: the event
// that call raises is queued, and delivered by the goroutine already
// delivering, once the current callback returns.

// emit queues ev and delivers it, unless a delivery is already under way.
func (l *Lease) emit(ev Event) {
	l.mu.Lock()
	l.enqueue(ev)
	l.mu.Unlock()
	l.deliver()
}

// enqueue queues ev for the Observer. The caller holds l.mu.
func (l *Lease) enqueue(ev Event) {
	if l.client.opts.Observer != nil {
		l.events = append(l.events, ev)
	}
}

// deliver hands queued events to the Observer, unless another call is
// already doing so (that call delivers them instead).
func (l *Lease) deliver() {
	l.mu.Lock()
	if l.delivering {
		l.mu.Unlock()
		return
	}
	l.delivering = true
	for len(l.events) > 0 {
		ev := l.events[0]
		l.events = l.events[1:]
		l.mu.Unlock()
		l.observeOne(ev)
		l.mu.Lock()
	}
	l.delivering = false
	l.mu.Unlock()
}

// observeOne calls the Observer; if it panics, the lease can still deliver
// later events.
func (l *Lease) observeOne(ev Event) {
	ok := false
	defer func() {
		if !ok {
			l.mu.Lock()
			l.delivering = false
			l.mu.Unlock()
		}
	}()
	l.client.observe(ev)
	ok = true
}
