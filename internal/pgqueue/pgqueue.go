// Package pgqueue holds the SQL of queued waiting on PostgreSQL: a lock's
// places in line (driver.Request.Place). adapters/postgres (pgx) and
// adapters/sqldb (database/sql, PostgreSQL dialect) share a lease table and
// its queue table, and their waiters stand in one line, so both must send
// the same statements: this package is the one place they are written. It
// also holds Unqueued, the polling both SQL adapters (MySQL included) fall
// back to while the queue table does not exist yet.
package pgqueue

import "fmt"

// Table creates the queue table: one row per waiter, ordered by
// (queued_at, owner), dropped when its place expires (expires_at, on the
// database clock). channel is the waiter's Backend's LISTEN channel (NULL
// for a waiter that polls, such as one of adapters/sqldb).
func Table(queue string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name       text COLLATE "C" NOT NULL,
    owner      text NOT NULL,
    queued_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    channel    text,
    PRIMARY KEY (name, owner)
)`, queue)
}

// Statements are the statements of queued waiting on one lease table.
type Statements struct {
	// Acquire is an acquire with a place in line. $1 name, $2 owner, $3 ttl, $4
	// metadata, $5 place TTL (each TTL as the caller's expressions say),
	// and the channel expression. Its one row: the token taken, or NULL
	// with the holder's remaining TTL in microseconds and the number of
	// live places ahead of owner's.
	Acquire string
	// Ahead counts the live places ahead of $2's in $1's queue (all live
	// places of others when $2 has none).
	Ahead string
	// Release is Release's UPDATE with a NOTIFY to the first listening
	// waiter in line. $1 name, $2 owner; its row: rows released, notices.
	Release string
	// Leave removes $2's place in $1's queue, waking the next waiter when
	// the lock is free.
	Leave string
}

// Build returns the statements on the lease table leases and its queue
// table queue (both sanitized). ttl and place are the SQL expressions that
// turn $3 and $5 into intervals (pgx sends an interval: "$3::interval";
// database/sql sends microseconds: "$3 * interval '1 microsecond'"), and
// channel the expression of the LISTEN channel a new place names ("$6", or
// "NULL" for a waiter that polls).
func Build(leases, queue, ttl, place, channel string) (s Statements) {
	ahead := fmt.Sprintf(`SELECT count(*) AS n FROM %[1]s w
    LEFT JOIN %[1]s m ON m.name = w.name AND m.owner = $2 AND m.expires_at > statement_timestamp()
    WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at > statement_timestamp()
      AND (m.owner IS NULL OR (w.queued_at, w.owner) < (m.queued_at, m.owner))`, queue)
	s.Acquire = fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[2]s WHERE name = $1 AND owner <> $2 AND expires_at <= statement_timestamp()
), ahead AS (
    %[3]s
), taken AS (
    INSERT INTO %[1]s AS l (name, owner, token, expires_at, metadata)
    VALUES ($1, $2, coalesce((SELECT token FROM %[1]s WHERE name = ''), 0) + 1,
            statement_timestamp() + %[4]s, NULLIF($4::text, ''))
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
    SELECT $1, $2, clock_timestamp(), statement_timestamp() + %[5]s, %[6]s
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
WHERE NOT EXISTS (SELECT 1 FROM taken)`, leases, queue, ahead, ttl, place, channel)

	// The first live place in line of name other than $2's, with its
	// wake-up: "<characters of owner>:<owner><name>" on its channel.
	first := fmt.Sprintf(`SELECT w.channel, length(w.owner)::text || ':' || w.owner || w.name AS payload
        FROM %s w WHERE w.name = $1 AND w.owner <> $2 AND w.expires_at > statement_timestamp()
        ORDER BY w.queued_at, w.owner LIMIT 1`, queue)
	// $1 name, $2 owner. Release's UPDATE, and a NOTIFY (sent at commit)
	// to the first waiter in line when the release took place and that
	// waiter listens. With nobody waiting it costs an index probe.
	s.Release = fmt.Sprintf(`WITH released AS (
    UPDATE %[1]s SET owner = NULL, expires_at = statement_timestamp(), metadata = NULL
    WHERE name = $1 AND owner = $2 AND expires_at > statement_timestamp()
    RETURNING name
)
SELECT (SELECT count(*) FROM released),
       (SELECT count(*) FROM (SELECT pg_notify(f.channel, f.payload) FROM (%[2]s) f
            WHERE f.channel IS NOT NULL AND EXISTS (SELECT 1 FROM released)) n)`, leases, first)
	// $1 name, $2 owner. Owner's place goes; when it was first in line and
	// the lock is free, the next waiter is woken.
	s.Leave = fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[2]s WHERE name = $1 AND owner = $2 RETURNING 1
)
SELECT count(*) FROM (SELECT pg_notify(f.channel, f.payload) FROM (%[3]s) f
    WHERE f.channel IS NOT NULL AND EXISTS (SELECT 1 FROM gone)
      AND NOT EXISTS (SELECT 1 FROM %[1]s h WHERE h.name = $1 AND h.owner IS NOT NULL
                      AND h.expires_at > statement_timestamp())) n`, leases, queue, first)
	s.Ahead = ahead
	return s
}
