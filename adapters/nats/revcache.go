package nats

import (
	"sync"

	"github.com/fencekit/fencekit/fence"
)

// maxCachedRevisions bounds a Store's revision cache; past it the cache
// starts over (a miss costs one read).
const maxCachedRevisions = 4096

// revision is a Store record's last message as this Store last wrote or
// read it: its sequence and the fence it carries.
type revision struct {
	seq   uint64
	fence fence.Token
}

// revCache remembers, per record key, the last message this Store wrote or
// read, so that a Put or a Delete whose token is at least that message's
// fence can publish at once, expecting that message's sequence, instead of
// reading it first. The expected sequence makes a stale entry harmless: the
// leader refuses the publish if anything was written to the key since (and
// a message's fence never changes), and the write falls back to reading.
// A fence only rises, so an entry above the token proves nothing the read
// would not: the write then reads, to report the current fence.
type revCache struct {
	mu sync.Mutex
	m  map[string]revision
}

func (c *revCache) get(key string) (revision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[key]
	return r, ok
}

func (c *revCache) put(key string, r revision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedRevisions {
		c.m = make(map[string]revision)
	}
	c.m[key] = r
}

func (c *revCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
