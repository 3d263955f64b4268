package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// permitTables are the sanitized names of the three tables of permits
// (semaphores and read-write locks) that go with a lease table: the lease
// table's name with "_permits" (one row per name: its shape, token
// counter, last writer and arrival counter, kept forever),
// "_permit_holders" (one row per permit) and "_permit_places" (one row per
// place in line) appended, in the lease table's schema.
type permitTables struct {
	state, holders, places string
}

// newPermitTables derives the permit tables' names from the lease table's.
// A lease table whose name leaves no room for a suffix within PostgreSQL's
// 63 bytes has no permit tables: the error says so, and only the permit
// methods (and not Migrate, nor the single-name locks) report it.
func newPermitTables(leases pgx.Identifier) (permitTables, error) {
	name := func(suffix string) (string, error) {
		id := append(pgx.Identifier{}, leases...)
		id[len(id)-1] += suffix
		s, err := tableName(id)
		if err != nil {
			return "", fmt.Errorf("postgres: permit table of LeaseTable %s: %w", leases.Sanitize(), err)
		}
		return s, nil
	}
	var t permitTables
	var err error
	if t.state, err = name("_permits"); err != nil {
		return permitTables{}, err
	}
	if t.holders, err = name("_permit_holders"); err != nil {
		return permitTables{}, err
	}
	if t.places, err = name("_permit_places"); err != nil {
		return permitTables{}, err
	}
	return t, nil
}

// ddl creates the three tables. kind holds a permit kind as storedKind
// writes it; a name's shape is kind 1 (a semaphore of lim permits) or 3 (a
// read-write lock), and 0 before its first permit.
func (t permitTables) ddl() string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
    name        text COLLATE "C" PRIMARY KEY,
    kind        smallint NOT NULL,
    lim         integer NOT NULL,
    token       bigint NOT NULL DEFAULT 0 CHECK (token >= 0),
    last_writer bigint NOT NULL DEFAULT 0,
    arrivals    bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS %s (
    name         text COLLATE "C" NOT NULL,
    owner        text NOT NULL,
    kind         smallint NOT NULL,
    token        bigint NOT NULL CHECK (token >= 1),
    prior_writer bigint NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
CREATE TABLE IF NOT EXISTS %s (
    name       text COLLATE "C" NOT NULL,
    owner      text NOT NULL,
    kind       smallint NOT NULL,
    seq        bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    channel    text,
    PRIMARY KEY (name, owner)
);
`, t.state, t.holders, t.places)
}

// permitSQL are the statements of permits. Every call that changes a name
// is a batch of two statements, sent in one round trip and run by the
// server as one implicit transaction (one Sync ends the batch): the first
// locks the name's state row, the second does the work. Under READ
// COMMITTED the second statement's snapshot is taken after the lock was
// granted, so it sees every change committed by whoever held the row
// before: the acquires, releases and extends of one name are serialized
// and each sees the others' effects. Everything is decided on the
// database clock (clock_timestamp(), read once per statement after the
// lock, in the CTE "now").
type permitSQL struct {
	// lockNew creates the state row of $1 when it has none, and locks it
	// either way: ON CONFLICT DO UPDATE locks the row it conflicts with
	// even when its WHERE (false here) lets nothing be updated, so no new
	// row version is written. A new row starts from the floor row (name
	// '', which no permit name can be), written only by the after-restore
	// statement of docs/postgres.md, so that names new since a backup also
	// mint tokens above every token issued before the restore.
	lockNew string
	// lockShared and lockOwn lock an existing state row of $1, shared (for
	// Extend, which changes only its own permit) or exclusive (for Release
	// and leavePermitLine, which decide whom to wake).
	lockShared, lockOwn string
	// acquire is acquirePermit's work, see buildPermitSQL.
	acquire string
	// extend renews $2's live permit on $1 to $3 from now.
	extend string
	// release deletes $2's live permit on $1 and wakes the places it lets
	// in; leave deletes $2's place and wakes the places that lets in.
	release, leave string
	// inspect reads $1's shape, live permits, live places and last writer.
	inspect string
	// missed tells a waiter that has just started listening whether it
	// may have missed its wake-up (see awaitPermit).
	missed string
}

// buildPermitSQL writes the statements on t. Parameters are always
// parameters: only the sanitized table names are spliced in.
func buildPermitSQL(t permitTables) permitSQL {
	// The live places of $1 (but $2's with filter "AND owner <> $2", when
	// the caller gives it up), in the order they arrived, with what a place
	// needs to know to be let in: i, how many live places are ahead of it,
	// and how many of those are writers.
	line := func(filter string) string {
		return fmt.Sprintf(`SELECT owner, kind, channel,
        row_number() OVER w - 1 AS i,
        count(*) FILTER (WHERE kind = 3) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS writers_ahead
    FROM %s WHERE name = $1 %s AND expires_at > (SELECT t FROM now)
    WINDOW w AS (ORDER BY seq)`, t.places, filter)
	}
	// Whether place p (a row of line) would be admitted now, given h (the
	// live permits) and s (the state row): the rules of acquirePermit.
	letIn := `CASE
        WHEN s.kind = 1 THEN (SELECT count(*) FROM h) + p.i < s.lim
        WHEN p.kind = 3 THEN p.i = 0 AND NOT EXISTS (SELECT 1 FROM h)
        ELSE p.writers_ahead = 0 AND NOT EXISTS (SELECT 1 FROM h WHERE kind = 3)
    END`
	// The notifications to every place in p that is let in. $1 is the
	// name; the payload is the waiter's mailbox (see permitBox).
	wake := fmt.Sprintf(`SELECT pg_notify(p.channel, 'p' || length(p.owner)::text || ':' || p.owner || $1::text)
    FROM p, %s s
    WHERE s.name = $1 AND p.channel IS NOT NULL AND %s`, t.state, letIn)
	now := `now AS MATERIALIZED (SELECT clock_timestamp() AS t)`
	var s permitSQL
	s.lockNew = fmt.Sprintf(`INSERT INTO %[1]s AS s (name, kind, lim, token, last_writer)
SELECT $1, 0, 0, coalesce(f.token, 0), coalesce(f.last_writer, 0)
FROM (SELECT 1) one LEFT JOIN %[1]s f ON f.name = ''
ON CONFLICT (name) DO UPDATE SET kind = s.kind WHERE false`, t.state)
	s.lockShared = fmt.Sprintf(`SELECT 1 FROM %s WHERE name = $1 FOR SHARE`, t.state)
	s.lockOwn = fmt.Sprintf(`SELECT 1 FROM %s WHERE name = $1 FOR UPDATE`, t.state)

	// $1 name, $2 owner, $3 kind, $4 limit, $5 TTL, $6 place TTL (0: no
	// place), $7 the waker's channel. The verdict, in this order:
	// 'shape' (the name is busy as another shape), 'kind' (owner holds a
	// permit of another kind), 'mine' (owner holds one of this kind:
	// extend it), 'admit', 'place' (not admitted, place kept) or 'held'.
	// Expired permits and places of others are deleted first; owner's own
	// expired rows are overwritten by the upserts instead (one statement
	// may not both delete and upsert a row).
	s.acquire = fmt.Sprintf(`WITH %[4]s,
st AS MATERIALIZED (SELECT kind, lim, token, last_writer, arrivals FROM %[1]s WHERE name = $1),
h AS MATERIALIZED (SELECT owner, kind, token, prior_writer, expires_at FROM %[2]s
    WHERE name = $1 AND expires_at > (SELECT t FROM now)),
p AS MATERIALIZED (SELECT owner, kind, seq FROM %[3]s WHERE name = $1 AND expires_at > (SELECT t FROM now)),
me AS MATERIALIZED (SELECT
    (SELECT kind FROM h WHERE owner = $2) AS held_kind,
    (SELECT token FROM h WHERE owner = $2) AS held_token,
    (SELECT prior_writer FROM h WHERE owner = $2) AS held_prior,
    (SELECT seq FROM p WHERE owner = $2) AS my_seq),
ahead AS MATERIALIZED (SELECT p.kind FROM p, me WHERE p.owner <> $2 AND (me.my_seq IS NULL OR p.seq < me.my_seq)),
d AS MATERIALIZED (SELECT st.token AS counter, st.last_writer, st.arrivals, me.*, CASE
    WHEN (EXISTS (SELECT 1 FROM h) OR EXISTS (SELECT 1 FROM p))
         AND CASE WHEN st.kind = 1 OR $3::smallint = 1 THEN st.kind <> $3::smallint OR st.lim <> $4::integer ELSE false END
        THEN 'shape'
    WHEN me.held_kind IS NOT NULL AND me.held_kind <> $3::smallint THEN 'kind'
    WHEN me.held_kind IS NOT NULL THEN 'mine'
    WHEN CASE $3::smallint
        WHEN 1 THEN (SELECT count(*) FROM h) + (SELECT count(*) FROM ahead) < $4::integer
        WHEN 3 THEN NOT EXISTS (SELECT 1 FROM h) AND NOT EXISTS (SELECT 1 FROM ahead)
        ELSE NOT EXISTS (SELECT 1 FROM h WHERE kind = 3) AND NOT EXISTS (SELECT 1 FROM ahead WHERE kind = 3)
    END THEN 'admit'
    WHEN $6::interval > interval '0' THEN 'place'
    ELSE 'held' END AS verdict
    FROM st, me),
gone_h AS (DELETE FROM %[2]s WHERE name = $1 AND owner <> $2 AND expires_at <= (SELECT t FROM now)),
gone_p AS (DELETE FROM %[3]s WHERE name = $1 AND owner <> $2 AND expires_at <= (SELECT t FROM now)),
bump AS (UPDATE %[1]s s SET
        token = CASE WHEN d.verdict = 'admit' THEN s.token + 1 ELSE s.token END,
        last_writer = CASE WHEN d.verdict = 'admit' AND $3::smallint = 3 THEN s.token + 1 ELSE s.last_writer END,
        kind = CASE WHEN d.verdict = 'admit' THEN CASE WHEN $3::smallint = 1 THEN 1 ELSE 3 END ELSE s.kind END,
        lim = CASE WHEN d.verdict = 'admit' THEN $4::integer ELSE s.lim END,
        arrivals = CASE WHEN d.verdict = 'place' AND d.my_seq IS NULL THEN s.arrivals + 1 ELSE s.arrivals END
    FROM d WHERE s.name = $1 AND (d.verdict = 'admit' OR (d.verdict = 'place' AND d.my_seq IS NULL))),
granted AS (INSERT INTO %[2]s AS x (name, owner, kind, token, prior_writer, expires_at)
    SELECT $1, $2, $3::smallint, d.counter + 1, d.last_writer, (SELECT t FROM now) + $5::interval FROM d WHERE d.verdict = 'admit'
    ON CONFLICT (name, owner) DO UPDATE SET kind = EXCLUDED.kind, token = EXCLUDED.token,
        prior_writer = EXCLUDED.prior_writer, expires_at = EXCLUDED.expires_at),
renewed AS (UPDATE %[2]s x SET expires_at = (SELECT t FROM now) + $5::interval
    FROM d WHERE x.name = $1 AND x.owner = $2 AND d.verdict = 'mine'),
unplaced AS (DELETE FROM %[3]s WHERE name = $1 AND owner = $2 AND (SELECT verdict FROM d) IN ('admit', 'mine')),
placed AS (INSERT INTO %[3]s AS w (name, owner, kind, seq, expires_at, channel)
    SELECT $1, $2, $3::smallint, d.arrivals + 1, (SELECT t FROM now) + $6::interval, $7::text FROM d WHERE d.verdict = 'place'
    ON CONFLICT (name, owner) DO UPDATE SET
        seq = CASE WHEN w.expires_at <= (SELECT t FROM now) THEN EXCLUDED.seq ELSE w.seq END,
        kind = EXCLUDED.kind, expires_at = EXCLUDED.expires_at, channel = EXCLUDED.channel)
SELECT d.verdict,
    CASE d.verdict WHEN 'admit' THEN d.counter + 1 WHEN 'mine' THEN d.held_token END,
    CASE d.verdict WHEN 'admit' THEN d.last_writer WHEN 'mine' THEN d.held_prior END,
    (SELECT floor(extract(epoch FROM min(expires_at) - clock_timestamp()) * 1000000)::bigint FROM h),
    st.kind, st.lim
FROM d, st`, t.state, t.holders, t.places, now)

	s.extend = fmt.Sprintf(`WITH %s
UPDATE %s SET expires_at = (SELECT t FROM now) + $3::interval
WHERE name = $1 AND owner = $2 AND expires_at > (SELECT t FROM now)`, now, t.holders)

	// Release: owner's live permit goes; the places that are let in by the
	// permits that stay are woken (all of them, not only the ones this
	// release let in: a second wake-up only makes a waiter ask early).
	s.release = fmt.Sprintf(`WITH %[1]s,
gone AS MATERIALIZED (DELETE FROM %[2]s WHERE name = $1 AND owner = $2 AND expires_at > (SELECT t FROM now) RETURNING 1),
h AS MATERIALIZED (SELECT kind FROM %[2]s WHERE name = $1 AND owner <> $2 AND expires_at > (SELECT t FROM now)),
p AS MATERIALIZED (%[3]s)
SELECT (SELECT count(*) FROM gone),
    (SELECT count(*) FROM (%[4]s AND EXISTS (SELECT 1 FROM gone)) n)`, now, t.holders, line("AND owner <> $2"), wake)
	s.leave = fmt.Sprintf(`WITH %[1]s,
gone AS MATERIALIZED (DELETE FROM %[5]s WHERE name = $1 AND owner = $2 RETURNING 1),
h AS MATERIALIZED (SELECT kind FROM %[2]s WHERE name = $1 AND expires_at > (SELECT t FROM now)),
p AS MATERIALIZED (%[3]s)
SELECT count(*) FROM (%[4]s AND EXISTS (SELECT 1 FROM gone)) n`, now, t.holders, line("AND owner <> $2"), wake, t.places)

	// Whether $2 may have missed a wake-up for $1: it has no live place
	// (nothing to wait for), or its place is let in now.
	s.missed = fmt.Sprintf(`WITH %[1]s,
h AS MATERIALIZED (SELECT kind FROM %[2]s WHERE name = $1 AND expires_at > (SELECT t FROM now)),
p AS MATERIALIZED (%[3]s)
SELECT NOT EXISTS (SELECT 1 FROM p WHERE owner = $2)
    OR EXISTS (SELECT 1 FROM p, %[4]s s WHERE p.owner = $2 AND s.name = $1 AND %[5]s)`, now, t.holders, line(""), t.state, letIn)

	s.inspect = fmt.Sprintf(`WITH %[4]s,
h AS (SELECT owner, kind, token, floor(extract(epoch FROM expires_at - (SELECT t FROM now)) * 1000000)::bigint AS micros
    FROM %[2]s WHERE name = $1 AND expires_at > (SELECT t FROM now)),
w AS (SELECT count(*) AS n FROM %[3]s WHERE name = $1 AND expires_at > (SELECT t FROM now))
SELECT coalesce(s.kind, 0), coalesce(s.lim, 0), coalesce(s.last_writer, 0), (SELECT n FROM w),
    ARRAY(SELECT owner FROM h ORDER BY token), ARRAY(SELECT kind FROM h ORDER BY token),
    ARRAY(SELECT token FROM h ORDER BY token), ARRAY(SELECT micros FROM h ORDER BY token)
FROM (SELECT 1) one LEFT JOIN %[1]s s ON s.name = $1`, t.state, t.holders, t.places, now)
	return s
}
