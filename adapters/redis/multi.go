package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock/driver"
)

// acquireSet takes every lock in names for owner for ttl in one script and
// one round trip, or none of them: when another owner holds any, it changes
// nothing and returns a *driver.HeldError for the first such name (in the
// order given) with its remaining TTL. Each lock is taken, or extended with
// its token when owner holds it, exactly as acquireLock does it, holder
// metadata md included.
//
// One script can touch keys of one hash slot only on a Redis Cluster, and of
// one shard only on a Ring, so acquireSet answers driver.ErrNotAtomic
// (sending nothing, and lock.Client then takes the names in order) when:
// the client is a cluster and the names do not all hash to one slot (each
// name is its own hash tag, so different names share a slot only by chance);
// the client is neither a *goredis.Client (a single node, or a Sentinel
// failover client) nor a cluster; or BackendOptions.WaitReplicas is set.
func (b *Backend) acquireSet(ctx context.Context, names []string, owner string, ttl time.Duration, md string) ([]fence.Token, error) {
	if !b.oneStep(names) {
		return nil, fmt.Errorf("fencekit/redis: acquire %q: %w", names, driver.ErrNotAtomic)
	}
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	keys := make([]string, 0, 2*len(names))
	for _, name := range names {
		keys = append(keys, b.LeaseKey(name), b.CounterKey(name))
	}
	reply, err := multiAcquireScript.run(ctx, b.client, resend, keys, owner, millis(ttl), b.counterIdle, md).Slice()
	if err != nil {
		b.reload.after(err)
		return nil, acquireError(fmt.Sprintf("%q", names), err)
	}
	return parseMultiAcquire(names, reply)
}

// oneStep reports whether one script can take names on b's client.
func (b *Backend) oneStep(names []string) bool {
	if b.wait.on() {
		return false
	}
	switch b.client.(type) {
	case *goredis.Client:
		return true
	case *goredis.ClusterClient:
		slot := hashSlot(escapeKey(names[0]))
		for _, n := range names[1:] {
			if hashSlot(escapeKey(n)) != slot {
				return false
			}
		}
		return true
	}
	return false
}

// parseMultiAcquire turns multi_acquire.lua's reply into tokens, in the
// order of names, or a *driver.HeldError.
func parseMultiAcquire(names []string, reply []any) ([]fence.Token, error) {
	if len(reply) == 2 {
		i, ok1 := reply[0].(int64)
		ms, ok2 := reply[1].(int64)
		if ok1 && ok2 && i >= 1 && int(i) <= len(names) {
			return nil, &driver.HeldError{Name: names[i-1], TTL: pttl(ms)}
		}
	}
	if len(reply) != len(names) {
		return nil, fmt.Errorf("fencekit/redis: acquire %q: unexpected reply %v", names, reply)
	}
	tokens := make([]fence.Token, len(names))
	for i, r := range reply {
		s, _ := r.(string)
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !fence.Token(t).Valid() {
			return nil, fmt.Errorf("fencekit/redis: acquire %q: unexpected reply %v", names, reply)
		}
		tokens[i] = fence.Token(t)
	}
	return tokens, nil
}

// hashSlot is the Redis Cluster slot of a key whose hash tag is tag: CRC16
// (XMODEM) of the tag, modulo 16384.
func hashSlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
