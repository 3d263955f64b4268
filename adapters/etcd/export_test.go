package etcd

// PreGranted reports whether b holds a lease granted ahead for owner's
// coming acquisition of name (see Backend.pregrant), for the tests.
func PreGranted(b *Backend, name, owner string) bool {
	b.waits.mu.Lock()
	defer b.waits.mu.Unlock()
	p, ok := b.waits.pre[[2]string{name, owner}]
	return ok && p.id != 0
}

// Awaiting is the number of awaitTurn calls waiting on b's line watch of
// name, once the watch has read the line (0 before), for the tests.
func Awaiting(b *Backend, name string) int {
	b.lines.mu.Lock()
	lw := b.lines.m[name]
	b.lines.mu.Unlock()
	if lw == nil {
		return 0
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.ready {
		return 0
	}
	return len(lw.turns)
}
