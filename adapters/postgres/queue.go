package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// queueTable returns the sanitized name of the queue table that goes with
// the lease table leases: the same schema, the lease table's name with
// "_queue" appended.
func queueTable(leases pgx.Identifier) (string, error) {
	q := append(pgx.Identifier{}, leases...)
	q[len(q)-1] += "_queue"
	s, err := tableName(q)
	if err != nil {
		return "", fmt.Errorf("postgres: queue table of LeaseTable %s: %w", leases.Sanitize(), err)
	}
	return s, nil
}

// mailbox names owner's wake-ups for name, as the statements write them.
func mailbox(name, owner string) string {
	return fmt.Sprintf("%d:%s%s", utf8.RuneCountInString(owner), owner, name)
}

// WakeChannel is this Backend's LISTEN channel, "fencekit_wake_" and 128
// random bits in hex: a waiter's place names it, and Release notifies the
// waiters it lets in on it, so a wake-up reaches only the process of the
// waiter it is for.
func (b *Backend) WakeChannel() string {
	if b.waker == nil {
		return ""
	}
	return b.waker.channel
}

// acquireInLine (Acquire with a Place) takes name for owner when the lock
// is free and no live place in its queue is ahead of owner's, minting the
// token exactly as acquireLock does, in the same statement; or extends
// owner's own lease. Otherwise it keeps owner's place in the queue table
// for placeTTL on the database clock (adding it at the tail when owner has
// none or its place had expired) and returns a *driver.HeldError: with the
// holder's remaining TTL when owner is first in line, 0 otherwise. Expired
// places are deleted by the same statement. It is one statement and one
// round trip whether or not anyone waits.
//
// Waiting is done by awaitTurn (Await); a Client calls both
// (lock.Client.Acquire). The Backend keeps a local mailbox for owner's
// wake-ups from the first call until owner acquires or leaves the queue
// (Leave), as the Client does when it gives up.
//
// Run Migrate after upgrading: until the queue table exists, it falls back
// to acquireLock, which may take a free lock ahead of others, and awaitTurn
// then backs off as a Client's polling does (waiting as before queued
// waiting, unfair but working). A missing lease table is still
// ErrNotMigrated.
func (b *Backend) acquireInLine(ctx context.Context, name, owner string, ttl, placeTTL time.Duration, md string) (fence.Token, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// The mailbox exists before the statement runs: a release right after
	// it finds it.
	box := mailbox(name, owner)
	b.waker.open(box)
	var token, heldMicros, ahead *int64
	err := b.db.QueryRow(ctx, b.acquireQueued, name, owner, interval(ttl), md, interval(placeTTL), b.waker.channel).
		Scan(&token, &heldMicros, &ahead)
	switch {
	case err != nil:
		err = wrapTableErr(b.table, fixMigrate, fmt.Sprintf("acquire %q (queued)", name), err)
		if errors.Is(err, ErrNotMigrated) {
			// No queue table yet (or an older lease table): poll, as a
			// Backend without queued waiting does (queue_fallback.go).
			return b.acquireUnqueued(ctx, name, owner, ttl, md)
		}
		return 0, err
	case token != nil:
		b.waker.close(box)
		b.unqueued.Forget(box)
		return fence.Token(*token), nil
	}
	b.unqueued.Forget(box) // in line: waits for wake-ups again
	held := &driver.HeldError{Name: name}
	if ahead == nil || *ahead == 0 {
		// First in line: wake at the holder's expiry. A lock that looked
		// free (a release between the upsert and its snapshot) is asked
		// again at once.
		held.TTL = time.Microsecond
		if heldMicros != nil && *heldMicros > 0 {
			held.TTL = time.Duration(*heldMicros) * time.Microsecond
		}
	}
	return 0, held
}

// awaitTurn waits until owner is woken for name (a release, or a waiter
// ahead leaving while the lock is free, notified on WakeChannel), max has
// passed, or ctx ends. The first wait through this Backend opens the
// listening connection and returns as soon as LISTEN took effect, so that
// the caller asks again and misses no release that came before it.
func (b *Backend) awaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	if b.err != nil {
		return b.err
	}
	box := mailbox(name, owner)
	if d, polling := b.unqueued.Backoff(box); polling {
		return wake.Wait(ctx, nil, min(d, max)) // no queue table: back off
	}
	return b.waker.await(ctx, box, max, nil)
}

// leaveQueue deletes owner's place in name's queue, notifying the next
// waiter when owner was first in line and the lock is free. One statement.
// Before Migrate created the queue table it returns nil: nobody has a
// place.
func (b *Backend) leaveQueue(ctx context.Context, name, owner string) error {
	if b.err != nil {
		return b.err
	}
	b.waker.close(mailbox(name, owner))
	b.unqueued.Forget(mailbox(name, owner))
	if err := ctx.Err(); err != nil {
		return err
	}
	var n int64
	if err := b.db.QueryRow(ctx, b.leave, name, owner).Scan(&n); err != nil {
		err = wrapTableErr(b.table, fixMigrate, fmt.Sprintf("leave the queue of %q", name), err)
		if errors.Is(err, ErrNotMigrated) {
			return nil // no queue table: nobody has a place to give up
		}
		return err
	}
	return nil
}
