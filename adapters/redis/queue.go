package redis

import (
	"context"
	_ "embed"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fence"
)

// The queue's scripts. queue.lua runs after acquire.lua, wrapped as a
// function, so that a queued acquire mints its token with the very code of
// a plain one. release_wake.lua is release.lua that also wakes the first
// waiter.
var (
	//go:embed scripts/queue.lua
	queueLua string
	//go:embed scripts/release_wake.lua
	releaseWakeLua string
	//go:embed scripts/leave.lua
	leaveLua string

	acquireQueuedScript = newScript("local function acquire()\n" + acquireLua + "\nend\n" + queueLua)
	releaseWakeScript   = newScript(releaseWakeLua)
	leaveScript         = newScript(leaveLua)
)

// QueueKey is the key of the sorted set of name's waiters, by arrival. It
// shares the hash tag of LeaseKey.
func (b *Backend) QueueKey(name string) string {
	return b.prefix + ":{" + escapeKey(name) + "}:queue"
}

// PlacesKey is the key of the sorted set of name's waiters by the expiry of
// their places, in server milliseconds.
func (b *Backend) PlacesKey(name string) string {
	return b.prefix + ":{" + escapeKey(name) + "}:places"
}

// QueuedKey is the key of name's flag "someone waits": set while the lock
// is held and has waiters (for as long as the newest place), deleted by the
// Release that wakes the first of them. The release deletes it together
// with the lease, in one DEL whose reply says whether it was there, so a
// release with nobody waiting reads nothing more than the owner.
func (b *Backend) QueuedKey(name string) string {
	return b.prefix + ":{" + escapeKey(name) + "}:queued"
}

// WakeChannel is this Backend's pub/sub channel, "<prefix>:wake:<128 random
// bits in hex>": a release wakes the first waiter of a lock on the channel of
// the Backend it queued through, with the message "<lease key> NUL <owner>",
// so a wake-up reaches the one process it is for, however many wait.
func (b *Backend) WakeChannel() string { return b.waker.channel }

// acquireInLine takes name for owner when the lock is free and nobody is
// ahead of owner in its queue, minting the token exactly as acquireLock
// does (the same script code, in the same script run), or extends owner's
// own lease; otherwise it keeps owner's place in the queue (adding it at the
// tail when it has none) for place on the server's clock and returns a
// *driver.HeldError with the holder's remaining TTL when owner is first in
// line, 0 otherwise. It is one script and one round trip; with nobody
// waiting, the script costs one command more than acquireLock's (a ZCARD of
// the missing queue). With BackendOptions.WaitReplicas it waits for the
// replicas as acquireLock does.
//
// Waiting is done by Await; a lock.Client calls both. The Backend keeps a
// local mailbox for owner's wake-ups from the first call until owner
// acquires or leaves the line (Leave), as the Client does when it gives up.
func (b *Backend) acquireInLine(ctx context.Context, name, owner string, ttl, place time.Duration, md string) (fence.Token, error) {
	if err := b.ready(ctx); err != nil {
		return 0, err
	}
	// The mailbox exists before the script runs: a release right after it
	// finds it.
	box := mailbox(b.LeaseKey(name), owner)
	b.waker.open(box)
	keys := []string{b.LeaseKey(name), b.CounterKey(name), b.QueueKey(name), b.PlacesKey(name), b.QueuedKey(name)}
	args := []any{owner, millis(ttl), b.counterIdle, md, millis(place), b.waker.channel}
	var (
		token fence.Token
		err   error
	)
	if b.wait.on() {
		token, err = b.acquireWait(ctx, acquireQueuedScript, name, owner, keys, args)
	} else {
		var reply any
		reply, err = acquireQueuedScript.run(ctx, b.client, resend, keys, args...).Result()
		if err != nil {
			b.reload.after(err)
			err = acquireError(name, err)
		} else {
			token, err = parseAcquire(name, reply)
		}
	}
	if err == nil {
		b.waker.close(box)
	}
	return token, err
}

// leaveQueue removes owner's place from name's queue, waking the next
// waiter when owner was first in line and the lock is free.
func (b *Backend) leaveQueue(ctx context.Context, name, owner string) error {
	b.waker.close(mailbox(b.LeaseKey(name), owner))
	if err := b.ready(ctx); err != nil {
		return err
	}
	keys := []string{b.QueueKey(name), b.PlacesKey(name), b.LeaseKey(name)}
	waiter := owner + "\x00" + b.waker.channel // as queue.lua names it
	if err := leaveScript.run(ctx, b.client, resend, keys, waiter).Err(); err != nil {
		b.reload.after(err)
		return opError("leave queue", name, err)
	}
	return nil
}

// releaseAndWake is releaseLock's script: compare-and-delete, then a wake-up for
// the first waiter in line. During a Cluster slot migration a script over
// keys of which one is missing (the queue, when nobody waits) is refused
// with TRYAGAIN before it runs; then the one-key release.lua is sent instead,
// and a waiter, if any, is served at its next renewal.
func (b *Backend) releaseAndWake(ctx context.Context, name, owner string) *goredis.Cmd {
	keys := []string{b.LeaseKey(name), b.QueueKey(name), b.QueuedKey(name)}
	cmd := releaseWakeScript.run(ctx, b.client, sendOnce, keys, owner)
	if goredis.HasErrorPrefix(cmd.Err(), "TRYAGAIN") {
		return releaseScript.run(ctx, b.client, sendOnce, keys[:1], owner)
	}
	return cmd
}
