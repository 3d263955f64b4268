package nats

import "sync"

// maxCachedLeases bounds a Backend's lease cache; past it the cache starts
// over (a miss costs one read).
const maxCachedLeases = 4096

// leaseCache remembers, per lock key, the last lease message this Backend
// wrote or read, so that Extend, Release and a same-owner Acquire can write
// at once, expecting that message's revision, instead of reading it first.
// The expected revision makes a stale entry harmless: the server refuses the
// write if anything changed the key since (a renewal elsewhere, an expiry,
// another holder), and the call falls back to reading.
type leaseCache struct {
	mu sync.Mutex
	m  map[string]lease
}

func (c *leaseCache) get(key, owner string) (lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[key]
	return l, ok && l.owner == owner
}

func (c *leaseCache) put(key string, l lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedLeases {
		c.m = make(map[string]lease)
	}
	c.m[key] = l
}

func (c *leaseCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
