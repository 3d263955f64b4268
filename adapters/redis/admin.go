package redis

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/lock"
)

// scanCount is the COUNT hint of each SCAN that List sends.
const scanCount = 1000

// keyUnescaper undoes keyEscaper. A strings.Replacer does not rescan what it
// wrote, so "%257B" becomes "%7B", the name it was made from.
var keyUnescaper = strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")

// globEscaper quotes the characters that SCAN's MATCH treats as a pattern.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// List returns the locks held now whose names start with prefix ("" for
// all), sorted by name, each as lock.Client.Inspect reports it (its holder
// and the live places in its line). It walks the key space with SCAN (on
// every master of a Cluster, every shard of a Ring), which does not block
// the server but costs time in proportion to the number of keys; it is
// meant for operators (cmd/fencectl), not for hot paths. A lock that is
// released or expires during the walk is left out, and one taken during it
// may be missed.
func (b *Backend) List(ctx context.Context, prefix string) ([]lock.Info, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	pattern := globEscaper.Replace(b.prefix+":{"+escapeKey(prefix)) + "*}:lease"
	var keys []string
	err := forEachNode(ctx, b.client, func(ctx context.Context, node Client) error {
		found, err := scanAll(ctx, node, pattern)
		keys = append(keys, found...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fencekit/redis: list %q: %w", prefix, err)
	}
	seen := map[string]bool{}
	var infos []lock.Info
	for _, key := range keys {
		name, ok := b.nameOf(key)
		if !ok || seen[name] {
			continue
		}
		seen[name] = true
		info, err := b.inspectLock(ctx, name)
		if err != nil {
			return nil, err
		}
		if len(info.Holders) == 1 {
			h := info.Holders[0]
			infos = append(infos, lock.Info{Name: name, Waiting: info.Waiting,
				Holders: []lock.Holder{{Owner: h.Owner, Token: h.Token, TTL: h.TTL, Metadata: h.Metadata}}})
		}
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	return infos, nil
}

// nameOf returns the lock name whose lease key is key.
func (b *Backend) nameOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, b.prefix+":{")
	if !ok {
		return "", false
	}
	esc, ok := strings.CutSuffix(rest, "}:lease")
	if !ok || strings.ContainsAny(esc, "{}") {
		return "", false
	}
	return keyUnescaper.Replace(esc), true
}

// forEachNode calls fn with each node that holds part of the key space: the
// masters of a Cluster, the shards of a Ring, or the client itself.
func forEachNode(ctx context.Context, c Client, fn func(context.Context, Client) error) error {
	// The go-redis walks call back concurrently; fn appends to its
	// caller's slice, so one node at a time.
	var mu sync.Mutex
	one := func(ctx context.Context, node *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(ctx, node)
	}
	switch cc := c.(type) {
	case *goredis.ClusterClient:
		return cc.ForEachMaster(ctx, one)
	case *goredis.Ring:
		return cc.ForEachShard(ctx, one)
	}
	return fn(ctx, c)
}

// scanAll returns every key on node that matches pattern, each SCAN bounded
// by ctx.
func scanAll(ctx context.Context, node Client, pattern string) ([]string, error) {
	var keys []string
	cursor := uint64(0)
	for {
		cmd := goredis.NewScanCmd(ctx, nil, "scan", cursor, "match", pattern, "count", scanCount)
		if err := bounded(ctx, func() { _ = node.Process(ctx, cmd) }); err != nil {
			return keys, err
		}
		page, next, err := cmd.Result()
		if err != nil {
			return keys, err
		}
		keys = append(keys, page...)
		if next == 0 {
			return keys, nil
		}
		cursor = next
	}
}

// PermitNames returns the permit names (semaphores and read-write locks)
// whose names start with prefix ("" for all) and that have a permit or a
// place in line, or had one when the walk saw them, sorted by name. Like
// List, it walks the key space with SCAN and is meant for operators
// (fencectl): Inspect each name with a permit kind for its holders, and
// leave out those that turn out idle.
func (b *Backend) PermitNames(ctx context.Context, prefix string) ([]string, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	pattern := globEscaper.Replace(b.prefix+":{"+escapeKey(prefix)) + "*}:permit:*"
	var keys []string
	err := forEachNode(ctx, b.client, func(ctx context.Context, node Client) error {
		found, err := scanAll(ctx, node, pattern)
		keys = append(keys, found...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fencekit/redis: list permit names %q: %w", prefix, err)
	}
	seen := map[string]bool{}
	var names []string
	for _, key := range keys {
		rest, ok := strings.CutPrefix(key, b.prefix+":{")
		if !ok {
			continue
		}
		var esc string
		if esc, ok = strings.CutSuffix(rest, "}:permit:held"); !ok {
			if esc, ok = strings.CutSuffix(rest, "}:permit:places"); !ok {
				continue // the counter outlives the permits: not a sign of use
			}
		}
		if strings.ContainsAny(esc, "{}") {
			continue
		}
		if name := keyUnescaper.Replace(esc); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}
