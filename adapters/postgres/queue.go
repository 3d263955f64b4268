package postgres

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.QueueBackend = (*Backend)(nil)

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

// queueSQL creates the queue table: one row per waiter, ordered by
// (queued_at, owner), dropped when its place expires (expires_at, on the
// database clock). channel is the waiter's Backend's LISTEN channel (NULL
// for a waiter that polls, such as one of adapters/sqldb).
func queueSQL(queue string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name       text COLLATE "C" NOT NULL,
    owner      text NOT NULL,
    queued_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    channel    text,
    PRIMARY KEY (name, owner)
);
`, queue)
}

// queueStatements builds the statements of queued waiting on the lease
// table leases and its queue table queue.
func queueStatements(leases, queue string) (acquire, release, leave string) {
	// $1 name, $2 owner, $3 ttl, $4 metadata, $5 place TTL, $6 channel.
	//
	// One statement, so one snapshot and one round trip: expired places of
	// others are deleted; owner takes the lock as Acquire does when it holds
	// it already, or when it is free and no live place is ahead of owner's
	// (owner's own live place, or the tail when it has none); otherwise
	// owner's place is kept (added at the tail, or moved there when it had
	// expired) and the reply carries the holder's remaining TTL and the
	// number of live places ahead. Owner's own expired place is left to the
	// upsert, so that no row is changed twice in one statement.
	ahead := fmt.Sprintf(`SELECT count(*) AS n FROM %[1]s w
    LEFT JOIN %[1]s m ON m.name = w.name AND m.owner = $2 AND m.expires_at > statement_timestamp()
    WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at > statement_timestamp()
      AND (m.owner IS NULL OR (w.queued_at, w.owner) < (m.queued_at, m.owner))`, queue)
	acquire = fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[2]s WHERE name = $1 AND owner <> $2 AND expires_at <= statement_timestamp()
), ahead AS (
    %[3]s
), taken AS (
    INSERT INTO %[1]s AS l (name, owner, token, expires_at, metadata)
    VALUES ($1, $2, coalesce((SELECT token FROM %[1]s WHERE name = ''), 0) + 1,
            statement_timestamp() + $3::interval, NULLIF($4::text, ''))
    ON CONFLICT (name) DO UPDATE SET
        owner = EXCLUDED.owner,
        token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > statement_timestamp()
                     THEN l.token ELSE l.token + 1 END,
        expires_at = EXCLUDED.expires_at,
        metadata = EXCLUDED.metadata
    WHERE (l.owner = EXCLUDED.owner AND l.expires_at > statement_timestamp())
       OR ((l.owner IS NULL OR l.expires_at <= statement_timestamp()) AND (SELECT n FROM ahead) = 0)
    RETURNING l.token
), left_queue AS (
    DELETE FROM %[2]s WHERE name = $1 AND owner = $2 AND EXISTS (SELECT 1 FROM taken)
), placed AS (
    INSERT INTO %[2]s AS w (name, owner, queued_at, expires_at, channel)
    SELECT $1, $2, clock_timestamp(), statement_timestamp() + $5::interval, $6
    WHERE NOT EXISTS (SELECT 1 FROM taken)
    ON CONFLICT (name, owner) DO UPDATE SET
        queued_at = CASE WHEN w.expires_at <= statement_timestamp() THEN EXCLUDED.queued_at ELSE w.queued_at END,
        expires_at = EXCLUDED.expires_at,
        channel = EXCLUDED.channel
)
SELECT token, NULL::bigint, 0::bigint FROM taken
UNION ALL
SELECT NULL, (SELECT floor(extract(epoch FROM h.expires_at - clock_timestamp()) * 1000000)::bigint
              FROM %[1]s h WHERE h.name = $1 AND h.owner IS NOT NULL),
       (SELECT n FROM ahead)
WHERE NOT EXISTS (SELECT 1 FROM taken)`, leases, queue, ahead)

	// The first live place in line of name other than $2's, with its
	// wake-up: "<characters of owner>:<owner><name>" on its channel.
	first := fmt.Sprintf(`SELECT w.channel, length(w.owner)::text || ':' || w.owner || w.name AS payload
        FROM %s w WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at > statement_timestamp()
        ORDER BY w.queued_at, w.owner LIMIT 1`, queue)
	// $1 name, $2 owner. Release's UPDATE, and a NOTIFY (sent at commit)
	// to the first waiter in line when the release took place and that
	// waiter listens. With nobody waiting it costs an index probe.
	release = fmt.Sprintf(`WITH released AS (
    UPDATE %[1]s SET owner = NULL, expires_at = statement_timestamp(), metadata = NULL
    WHERE name = $1 AND owner = $2 AND expires_at > statement_timestamp()
    RETURNING name
)
SELECT (SELECT count(*) FROM released),
       (SELECT count(*) FROM (SELECT pg_notify(f.channel, f.payload) FROM (%[2]s) f
            WHERE f.channel IS NOT NULL AND EXISTS (SELECT 1 FROM released)) n)`, leases, first)
	// $1 name, $2 owner. Owner's place goes; when it was first in line and
	// the lock is free, the next waiter is woken.
	leave = fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[2]s WHERE name = $1 AND owner = $2 RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify(f.channel, f.payload) FROM (%[3]s) f
    WHERE f.channel IS NOT NULL AND EXISTS (SELECT 1 FROM gone)
      AND NOT EXISTS (SELECT 1 FROM %[1]s h WHERE h.name = $1 AND h.owner IS NOT NULL
                      AND h.expires_at > statement_timestamp())) n`, leases, queue, first)
	return acquire, release, leave
}

// mailbox names owner's wake-ups for name, as the statements write them.
func mailbox(name, owner string) string {
	return fmt.Sprintf("%d:%s%s", utf8.RuneCountInString(owner), owner, name)
}

// WakeChannel is this Backend's LISTEN channel, "fencekit_wake_" and 128
// random bits in hex: a waiter's place names it, and Release notifies the
// first waiter in line on it, so a wake-up reaches only the process of the
// waiter it is for.
func (b *Backend) WakeChannel() string {
	if b.waker == nil {
		return ""
	}
	return b.waker.channel
}

// AcquireOrEnqueue takes name for owner when the lock is free and no live
// place in its queue is ahead of owner's, minting the token exactly as
// Acquire does, in the same statement; or extends owner's own lease.
// Otherwise it keeps owner's place in the queue table for placeTTL on the
// database clock (adding it at the tail when owner has none or its place
// had expired) and returns a *lock.HeldError: with the holder's remaining
// TTL when owner is first in line, 0 otherwise. Expired places are deleted
// by the same statement. It is one statement and one round trip whether
// or not anyone waits.
//
// Waiting is done by AwaitTurn; a Client calls both (lock.Client.Acquire).
// The Backend keeps a local mailbox for owner's wake-ups from the first
// call until owner acquires or calls LeaveQueue, as the Client does when it
// gives up. The queue table must exist: run Migrate after upgrading.
func (b *Backend) AcquireOrEnqueue(ctx context.Context, name, owner string, ttl, placeTTL time.Duration) (fence.Token, error) {
	md, err := lock.ValidateAcquire(ctx, name, owner, ttl)
	if err != nil {
		return 0, err
	}
	if err := lock.ValidatePlace(name, owner, ttl, placeTTL); err != nil {
		return 0, err
	}
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
	err = b.db.QueryRow(ctx, b.acquireQueued, name, owner, interval(ttl), md, interval(placeTTL), b.waker.channel).
		Scan(&token, &heldMicros, &ahead)
	switch {
	case err != nil:
		return 0, wrapTableErr(b.table, fixMigrate, fmt.Sprintf("acquire %q (queued)", name), err)
	case token != nil:
		b.waker.close(box)
		return fence.Token(*token), nil
	}
	held := &lock.HeldError{Name: name}
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

// AwaitTurn waits until owner is woken for name (a Release, or a waiter
// ahead leaving while the lock is free, notified on WakeChannel), max has
// passed, or ctx ends. The first wait through this Backend opens the
// listening connection and returns as soon as LISTEN took effect, so that
// the caller asks again and misses no release that came before it.
func (b *Backend) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	return b.waker.await(ctx, mailbox(name, owner), max)
}

// LeaveQueue deletes owner's place in name's queue, notifying the next
// waiter when owner was first in line and the lock is free. One statement.
func (b *Backend) LeaveQueue(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	b.waker.close(mailbox(name, owner))
	if err := ctx.Err(); err != nil {
		return err
	}
	var n int64
	if err := b.db.QueryRow(ctx, b.leave, name, owner).Scan(&n); err != nil {
		return wrapTableErr(b.table, fixMigrate, fmt.Sprintf("leave the queue of %q", name), err)
	}
	return nil
}
