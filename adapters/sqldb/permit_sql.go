package sqldb

import "fmt"

// permitSQL holds the statements of semaphores and read-write locks on the
// two permit tables (see permitTablesSQL). Every value is a parameter.
type permitSQL struct {
	names, owners string // the tables, quoted, for messages
	err           error  // a permit table name that does not fit the dialect

	// lock inserts name's row when it is missing and locks it, so that
	// the acquires of one name run one at a time. PostgreSQL: it also
	// returns the row (the columns of readRow's first five).
	lock string
	// claim (MySQL) inserts the owner's row when it is missing, as a
	// placeholder that counts for nothing (no token, no kind, expired
	// long ago), and locks it: the acquire's one insert into the owners
	// table, made before its locking read takes any gap lock (see
	// acquirePermit). Rolled back unless the acquire writes the row.
	claim string
	// read returns name's row joined with its owners' rows (see
	// scanPermitRows), every owner row, expired or not, with its
	// remaining time on the server's clock; MySQL's locked variant
	// (readLocked) locks the owner rows too. PostgreSQL's readLocked
	// returns the owner rows alone, locked.
	read, readLocked string
	// MySQL: drop others' expired rows; put owner's row (a permit, or a
	// place with a NULL token); write name's row. PostgreSQL: write, one
	// statement that does all three.
	dropExpired, putOwner, putName, write string
	// extend renews owner's live permit; release deletes it; leave deletes
	// owner's place.
	extend, release, leave string
}

func newPermitSQL(d Dialect, opts *Options) permitSQL {
	names, owners, err := opts.permitTables(d)
	if err != nil {
		return permitSQL{err: err}
	}
	p := permitSQL{names: names, owners: owners}
	if d == MySQL {
		p.lock = fmt.Sprintf("INSERT INTO %s (`name`) VALUES (?) ON DUPLICATE KEY UPDATE `name` = `name`", names)
		p.claim = fmt.Sprintf("INSERT INTO %s (`name`, `owner`, `kind`, `token`, `expires_at`) VALUES (?, ?, 0, NULL, '1970-01-01 00:00:00')\n"+
			"ON DUPLICATE KEY UPDATE `name` = `name`", owners)
		// An InnoDB locking read sees the newest committed rows, whatever
		// the isolation level, and holds them until commit: a concurrent
		// Extend or Release of one of them waits, and then finds what
		// this transaction left.
		p.read = fmt.Sprintf("SELECT n.`kind`, n.`max_permits`, n.`token`, n.`last_writer`, n.`arrivals`,\n"+
			"  o.`owner`, o.`kind`, o.`token`, o.`prior_writer`, o.`arrival`, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), o.`expires_at`)\n"+
			"FROM %s n LEFT JOIN %s o ON o.`name` = n.`name` WHERE n.`name` = ?", names, owners)
		p.readLocked = p.read + " FOR UPDATE"
		p.dropExpired = fmt.Sprintf("DELETE FROM %s WHERE `name` = ? AND `owner` <> ? AND `expires_at` <= UTC_TIMESTAMP(6)", owners)
		p.putOwner = fmt.Sprintf("INSERT INTO %s (`name`, `owner`, `kind`, `token`, `prior_writer`, `arrival`, `expires_at`)\n"+
			"VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)\n"+
			"ON DUPLICATE KEY UPDATE `kind` = VALUES(`kind`), `token` = VALUES(`token`), `prior_writer` = VALUES(`prior_writer`),\n"+
			"  `arrival` = VALUES(`arrival`), `expires_at` = VALUES(`expires_at`)", owners)
		p.putName = fmt.Sprintf("UPDATE %s SET `kind` = ?, `max_permits` = ?, `token` = ?, `last_writer` = ?, `arrivals` = ? WHERE `name` = ?", names)
		// LAST_INSERT_ID(token) is evaluated only for the matched row: the
		// reply says whether it matched, whatever CLIENT_FOUND_ROWS says.
		p.extend = fmt.Sprintf("UPDATE %s SET `expires_at` = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, `token` = LAST_INSERT_ID(`token`)\n"+
			"WHERE `name` = ? AND `owner` = ? AND `token` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6)", owners)
		p.release = fmt.Sprintf("DELETE FROM %s WHERE `name` = ? AND `owner` = ? AND `token` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6)", owners)
		p.leave = fmt.Sprintf("DELETE FROM %s WHERE `name` = ? AND `owner` = ? AND `token` IS NULL", owners)
		return p
	}
	// PostgreSQL. The row lock comes first, in a statement of its own:
	// under READ COMMITTED each statement reads the rows committed when it
	// starts, so the owner rows must be read by a later statement than the
	// one that waited for the lock.
	p.lock = fmt.Sprintf(`INSERT INTO %s AS n (name) VALUES ($1)
ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
RETURNING n.kind, n.max_permits, n.token, n.last_writer, n.arrivals`, names)
	remaining := "floor(extract(epoch FROM o.expires_at - statement_timestamp()) * 1000000)::bigint"
	p.read = fmt.Sprintf(`SELECT n.kind, n.max_permits, n.token, n.last_writer, n.arrivals,
  o.owner, o.kind, o.token, o.prior_writer, o.arrival, %s
FROM %s n LEFT JOIN %s o ON o.name = n.name WHERE n.name = $1`, remaining, names, owners)
	p.readLocked = fmt.Sprintf(`SELECT o.owner, o.kind, o.token, o.prior_writer, o.arrival, %s
FROM %s o WHERE o.name = $1 FOR UPDATE`, remaining, owners)
	// $1 name, $2 owner, $3 kind, $4 token (NULL: a place), $5 prior
	// writer, $6 arrival, $7 TTL in microseconds, then name's row: $8 kind,
	// $9 max_permits, $10 token, $11 last_writer, $12 arrivals.
	p.write = fmt.Sprintf(`WITH gone AS (
    DELETE FROM %[2]s WHERE name = $1 AND owner <> $2 AND expires_at <= statement_timestamp()
), named AS (
    UPDATE %[1]s SET kind = $8, max_permits = $9, token = $10, last_writer = $11, arrivals = $12 WHERE name = $1
)
INSERT INTO %[2]s AS o (name, owner, kind, token, prior_writer, arrival, expires_at)
VALUES ($1, $2, $3, $4::bigint, $5, $6, statement_timestamp() + $7 * interval '1 microsecond')
ON CONFLICT (name, owner) DO UPDATE SET kind = EXCLUDED.kind, token = EXCLUDED.token,
    prior_writer = EXCLUDED.prior_writer, arrival = EXCLUDED.arrival, expires_at = EXCLUDED.expires_at`, names, owners)
	p.extend = fmt.Sprintf(`UPDATE %s SET expires_at = statement_timestamp() + $1 * interval '1 microsecond'
WHERE name = $2 AND owner = $3 AND token IS NOT NULL AND expires_at > statement_timestamp()`, owners)
	p.release = fmt.Sprintf(`DELETE FROM %s WHERE name = $1 AND owner = $2 AND token IS NOT NULL AND expires_at > statement_timestamp()`, owners)
	p.leave = fmt.Sprintf(`DELETE FROM %s WHERE name = $1 AND owner = $2 AND token IS NULL`, owners)
	return p
}
