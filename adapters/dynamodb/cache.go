package dynamodb

// A Backend remembers, for each item it has live entries on, the newest
// state of it that it wrote or read, with its revision and counter, so
// that its next write needs no read first (combine.go): most changes of a
// name come through the one Backend of the process that uses the name,
// and each read saved is a round trip off a handoff. A state remembered
// is only ever a starting point: the write is conditional on its revision
// and fails if anybody wrote since, and then the Backend reads. It is
// forgotten when a write fails or its outcome is unknown, and when the
// item is left with no entry (the next call reads it), so that a Backend
// keeps no state of names nobody holds or waits for.

// cached returns the state of the item key that the Backend remembers.
func (b *Backend) cached(key string) (item, bool) {
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	it, ok := b.cache[key]
	if ok {
		it.st = it.st.clone()
	}
	return it, ok
}

// remember keeps it as the newest known state of its item, unless the
// Backend knows a newer one; an item with no entries is forgotten.
func (b *Backend) remember(it item) {
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	if old, ok := b.cache[it.key]; ok && old.rev > it.rev {
		return
	}
	if !it.exists || it.st.idle() {
		delete(b.cache, it.key)
		return
	}
	it.st = it.st.clone() // the caller's slices are the caller's
	b.cache[it.key] = it
}

// forget drops what the Backend remembers of the item key.
func (b *Backend) forget(key string) {
	b.cacheMu.Lock()
	defer b.cacheMu.Unlock()
	delete(b.cache, key)
}
