package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgqueue"
	"github.com/fencekit/fencekit/lock/driver"
)

// Backend is a lock backend (a driver.Backend) on a lease table with one
// row per lock name: (name, owner, token, expires_at, metadata). Use it
// through lock.New. It serves every shape of the driver contract: locks,
// with queued waiting on a queue table next to the lease table (see
// Backend.Acquire and Backend.Await), sets of locks in one transaction,
// resumed leases, and semaphores and read-write locks on two permit tables
// of their own.
//
// Expiry is decided by the database clock alone (MySQL: UTC_TIMESTAMP(6),
// NOW(6) in UTC; PostgreSQL: statement_timestamp()), so clients need no
// synchronised clocks. The token lives in the row and is raised by the same
// statement that grants a lease, and only Sweep deletes rows (Release only
// clears the owner), so a name's tokens keep rising across releases,
// expiries and server restarts.
//
// On both dialects a new row starts above the floor row (the row named "",
// which no lock can have; on PostgreSQL the one of adapters/postgres):
// rows deleted by Sweep (or postgres.Backend.Sweep on a shared table), and
// a restore followed by Admin.Bump (fencectl bump), keep a name's tokens
// rising. Do not delete rows by hand: without a floor raised past its
// token, a name's tokens would start again from the floor.
//
// Backend takes a *sql.DB, never a *sql.Tx: a token minted inside a
// transaction that then rolls back would be minted again for the next
// holder (two holders with one token), and a lock.Client calls its Backend
// from several goroutines at once. Every call on a lock is one autocommit
// statement (an Acquire without a place reads once more when the lock is
// held, for the remaining TTL; see Backend.Acquire for the others), and no
// session state is used, so any pooled connection will do.
//
// On MySQL the statements learn their outcome from LAST_INSERT_ID(expr),
// returned in the reply, never from the affected-rows count, so the
// driver's CLIENT_FOUND_ROWS setting (clientFoundRows in
// go-sql-driver/mysql) changes nothing.
type Backend struct {
	d                                Dialect
	db                               *sql.DB
	table                            string // quoted, for messages
	err                              error
	acquire, extend, release, lookup string
	q                                queueSQL         // see acquireInLine
	waits                            sync.Map         // waitKey → *pace, see awaitTurn
	local                            localLines       // the waiters in line through this Backend (queue_local.go)
	queue                            string           // the queue table, quoted, for messages
	unqueued                         pgqueue.Unqueued // waiters polling without the queue table (queue_fallback.go)
	pm                               permitSQL        // semaphores and read-write locks (permit.go)
	pw                               permitWaiters    // their waiters in line through this Backend (permit_wait.go)
}

// NewBackend returns a Backend on db in dialect d with the lease table
// named in opts (nil for the default fencekit_leases). The table must exist
// (see Migrate). An unknown dialect, a malformed table name or a nil db is
// reported by every method as an error matching fence.ErrInvalid, before
// anything is sent.
func NewBackend(db *sql.DB, d Dialect, opts *Options) *Backend {
	_, table, err := opts.tables(d)
	var queue string
	if err == nil {
		queue, err = opts.queueTable(d)
	}
	if err == nil && db == nil {
		err = fence.Invalid("sqldb: nil *sql.DB")
	}
	if err != nil {
		return &Backend{err: err}
	}
	b := &Backend{d: d, db: db, table: table, queue: queue, q: newQueueSQL(d, table, queue), pm: newPermitSQL(d, opts)}
	if d == MySQL {
		// Free (no owner), expired, or already ours: take it. The
		// assignments run left to right, each seeing the ones before, so
		// the token is computed first, from the old owner and expiry, and
		// the owner is assigned before the expiry (whose condition then
		// holds through owner = VALUES(owner) exactly when the lease was
		// taken). Each condition is also right when the server assigns
		// simultaneously (MariaDB's SIMULTANEOUS_ASSIGNMENT).
		//
		// The reply's LAST_INSERT_ID is the outcome: the token taken
		// (for a new row, one above the floor row that Sweep and
		// Admin.Bump keep, from VALUES), or 0 when another owner holds
		// the lock. The floor is read through a derived table with an
		// aggregate, which is materialized: MySQL refuses a subquery on
		// the table an INSERT writes to (error 1093) unless it is.
		take := "(`owner` IS NULL OR `expires_at` <= UTC_TIMESTAMP(6) OR `owner` = VALUES(`owner`))"
		b.acquire = fmt.Sprintf("INSERT INTO %[1]s (`name`, `owner`, `token`, `expires_at`, `metadata`)\n"+
			"VALUES (?, ?, %[3]s,\n"+
			"        UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULLIF(?, ''))\n"+
			"ON DUPLICATE KEY UPDATE\n"+
			"  `token` = IF(%[2]s,\n"+
			"    LAST_INSERT_ID(IF(`owner` = VALUES(`owner`) AND `expires_at` > UTC_TIMESTAMP(6), `token`, `token` + 1)),\n"+
			"    `token` + LAST_INSERT_ID(0 * `token`)),\n"+
			"  `metadata` = IF(%[2]s, VALUES(`metadata`), `metadata`),\n"+
			"  `owner` = IF(%[2]s, VALUES(`owner`), `owner`),\n"+
			"  `expires_at` = IF(%[2]s, VALUES(`expires_at`), `expires_at`)", table, take, mysqlNewRowToken(table))
		// LAST_INSERT_ID(token) is evaluated only for the matched row:
		// nonzero means done, whatever the affected-rows count says.
		b.extend = fmt.Sprintf("UPDATE %s SET `expires_at` = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, `token` = LAST_INSERT_ID(`token`)\n"+
			"WHERE `name` = ? AND `owner` = ? AND `expires_at` > UTC_TIMESTAMP(6)", table)
		// The token stays: the next holder gets token+1.
		b.release = fmt.Sprintf("UPDATE %s SET `owner` = NULL, `expires_at` = UTC_TIMESTAMP(6), `metadata` = NULL, `token` = LAST_INSERT_ID(`token`)\n"+
			"WHERE `name` = ? AND `owner` = ? AND `expires_at` > UTC_TIMESTAMP(6)", table)
		b.lookup = fmt.Sprintf("SELECT `owner`, `token`, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), `expires_at`), `metadata` FROM %s WHERE `name` = ?", table)
		return b
	}
	// The statements of adapters/postgres, the TTL passed as
	// microseconds. A new row starts above the floor row (name '') that
	// postgres.Backend.Sweep and postgres.Admin.Bump (fencectl bump) keep
	// on a shared table, so tokens keep rising across sweeps and restores.
	b.acquire = fmt.Sprintf(`WITH taken AS (
    INSERT INTO %[1]s AS l (name, owner, token, expires_at, metadata)
    VALUES ($1, $2, coalesce((SELECT token FROM %[1]s WHERE name = ''), 0) + 1,
            statement_timestamp() + $3 * interval '1 microsecond', NULLIF($4::text, ''))
    ON CONFLICT (name) DO UPDATE SET
        owner = EXCLUDED.owner,
        token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > statement_timestamp()
                     THEN l.token ELSE l.token + 1 END,
        expires_at = EXCLUDED.expires_at,
        metadata = EXCLUDED.metadata
    WHERE l.owner IS NULL OR l.expires_at <= statement_timestamp() OR l.owner = EXCLUDED.owner
    RETURNING l.token
)
SELECT token, NULL::bigint FROM taken
UNION ALL
SELECT NULL, floor(extract(epoch FROM h.expires_at - clock_timestamp()) * 1000000)::bigint
FROM %[1]s h
WHERE h.name = $1 AND h.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taken)`, table)
	b.extend = fmt.Sprintf(`UPDATE %s SET expires_at = statement_timestamp() + $1 * interval '1 microsecond'
WHERE name = $2 AND owner = $3 AND expires_at > statement_timestamp()`, table)
	b.release = fmt.Sprintf(`UPDATE %s SET owner = NULL, expires_at = statement_timestamp(), metadata = NULL
WHERE name = $1 AND owner = $2 AND expires_at > statement_timestamp()`, table)
	b.lookup = fmt.Sprintf(`SELECT owner, token, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, metadata FROM %s WHERE name = $1`, table)
	return b
}

// acquireLock takes the lock name for owner for ttl and returns a new
// token, above every token issued for name before; or, when owner already
// holds it, extends the lease to ttl and returns the same token. It ignores
// the line of queued waiting (a request without a place may take a free
// lock ahead of waiters). When another owner holds it, the error is a
// *driver.HeldError with the remaining TTL.
//
// md goes to the row's metadata column as a parameter, replacing what a
// same-owner acquire stored before; extendLock keeps it, releaseLock clears
// it.
func (b *Backend) acquireLock(ctx context.Context, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	where := fmt.Sprintf("acquire %q", name)
	for attempt := 1; ; attempt++ {
		token, held, err := b.tryAcquire(ctx, b.db, name, owner, ttl, md)
		switch {
		case err != nil && isConflict(err) && attempt < 3 && ctx.Err() == nil:
			continue // the statement was undone whole: run it again
		case err != nil:
			return 0, classify(ctx, b.d, b.table, fixMigrate, where, err)
		case token > 0:
			return token, nil
		case held > 0:
			return 0, &driver.HeldError{Name: name, TTL: held}
		}
		// Held by someone else: find out for how long.
		row, err := b.lookupRow(ctx, name)
		if err != nil {
			return 0, err
		}
		if row.held || attempt >= 3 {
			return 0, &driver.HeldError{Name: name, TTL: row.ttl}
		}
		// Released or expired in between: try again.
	}
}

// tryAcquire runs the acquire statement once on db (b.db, or acquireSet's
// transaction): the token taken, or (on PostgreSQL) the holder's remaining
// TTL, or neither.
func (b *Backend) tryAcquire(ctx context.Context, db execer, name, owner string, ttl time.Duration, md string) (fence.Token, time.Duration, error) {
	micros := ttl.Microseconds()
	if b.d == MySQL {
		res, err := db.ExecContext(ctx, b.acquire, name, owner, micros, md)
		if err != nil {
			return 0, 0, err
		}
		id, err := res.LastInsertId()
		return fence.Token(id), 0, err
	}
	var token, heldMicros sql.NullInt64
	err := db.QueryRowContext(ctx, b.acquire, name, owner, micros, md).Scan(&token, &heldMicros)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, 0, nil
	case err != nil:
		return 0, 0, err
	case token.Valid:
		return fence.Token(token.Int64), 0, nil
	case heldMicros.Valid && heldMicros.Int64 > 0:
		return 0, time.Duration(heldMicros.Int64) * time.Microsecond, nil
	}
	return 0, 0, nil
}

// extendLock renews owner's live lease on name to ttl from now. It never
// re-creates a lease that expired or was released: then, or when another
// owner holds the lock, it returns an error matching driver.ErrNotHeld.
func (b *Backend) extendLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.update(ctx, "extend", b.extend, name, ttl.Microseconds(), name, owner)
}

// releaseLock frees name if owner holds a live lease on it, keeping the
// token so that the next holder's is higher, and wakes the waiter that
// re-checks for this Backend. Otherwise it returns an error matching
// driver.ErrNotHeld and changes nothing.
func (b *Backend) releaseLock(ctx context.Context, name, owner string) error {
	var err error
	if b.d == PostgreSQL {
		err = b.releaseAndNotify(ctx, name, owner)
	} else {
		err = b.update(ctx, "release", b.release, name, name, owner)
	}
	if err == nil {
		b.local.wakeLeader(name) // a waiter here re-checks at once
	}
	return err
}

// releaseAndNotify is releaseLock on PostgreSQL: one statement that
// releases and notifies the first waiter in line if it listens (a waiter of
// adapters/postgres on a shared table; see queueSQL).
func (b *Backend) releaseAndNotify(ctx context.Context, name, owner string) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	where := fmt.Sprintf("release %q", name)
	for attempt := 1; ; attempt++ {
		var released, notified int64
		err := b.db.QueryRowContext(ctx, b.q.release, name, owner).Scan(&released, &notified)
		switch {
		case err != nil && isConflict(err) && attempt < 3 && ctx.Err() == nil:
			continue
		case err != nil:
			err = classify(ctx, b.d, b.table, fixMigrate, where, err)
			if errors.Is(err, ErrNotMigrated) {
				// The statement failed before it ran: no queue table yet
				// (a schema that Migrate has not upgraded), so nobody can
				// wait on it either. Release as before.
				return b.update(ctx, "release", b.release, name, name, owner)
			}
			return err
		case released == 0:
			return fmt.Errorf("sqldb: %s: %w", where, driver.ErrNotHeld)
		}
		return nil
	}
}

// update runs extend or release: one UPDATE of the owner's live row. On
// MySQL the reply's LAST_INSERT_ID says whether it matched; on PostgreSQL
// the row count does.
func (b *Backend) update(ctx context.Context, op, query, name string, args ...any) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	where := fmt.Sprintf("%s %q", op, name)
	for attempt := 1; ; attempt++ {
		res, err := b.db.ExecContext(ctx, query, args...)
		if err != nil {
			if isConflict(err) && attempt < 3 && ctx.Err() == nil {
				continue
			}
			return classify(ctx, b.d, b.table, fixMigrate, where, err)
		}
		var n int64
		if b.d == MySQL {
			n, err = res.LastInsertId()
		} else {
			n, err = res.RowsAffected()
		}
		if err != nil {
			return classify(ctx, b.d, b.table, fixMigrate, where, err)
		}
		if n == 0 {
			return fmt.Errorf("sqldb: %s: %w", where, driver.ErrNotHeld)
		}
		return nil
	}
}

// inspectLock reports the holder of the lock name, its token, remaining
// TTL (as the database clock sees it) and metadata, and the live places in
// its line: one read-only statement. A free lock has no holder. On a schema
// that Migrate has not upgraded (no queue table yet) it reads the lease row
// alone, and nobody waits.
func (b *Backend) inspectLock(ctx context.Context, name string) (driver.Info, error) {
	if b.err != nil {
		return driver.Info{}, b.err
	}
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	var (
		owner, md        sql.NullString
		token, remaining sql.NullInt64
		waiting          int64
	)
	var row leaseRow
	if err := b.db.QueryRowContext(ctx, b.q.inspect, name, name).Scan(&owner, &token, &remaining, &md, &waiting); err != nil {
		err = classify(ctx, b.d, b.table, fixMigrate, fmt.Sprintf("inspect %q", name), err)
		if !errors.Is(err, ErrNotMigrated) {
			return driver.Info{}, err
		}
		// No queue table yet (or no lease table): the lease row alone,
		// whose error then names the lease table; nobody waits.
		if row, err = b.lookupRow(ctx, name); err != nil {
			return driver.Info{}, err
		}
		waiting = 0
	} else {
		row = liveRow(owner, md, token.Int64, remaining)
	}
	info := driver.Info{Name: name, Kind: driver.Exclusive, Waiting: int(waiting)}
	if row.held {
		info.Holders = []driver.Holder{{Owner: row.owner, Kind: driver.Exclusive, Token: row.token, TTL: row.ttl, Metadata: row.metadata}}
	}
	return info, nil
}

// leaseRow is a lock's live lease as its row says; held is false when the
// name has no row, no owner, or an expired one.
type leaseRow struct {
	held     bool
	owner    string
	token    fence.Token
	ttl      time.Duration
	metadata string
}

// liveRow makes the leaseRow of a lease row's columns.
func liveRow(owner, md sql.NullString, token int64, remaining sql.NullInt64) leaseRow {
	if !owner.Valid || !remaining.Valid || remaining.Int64 <= 0 {
		return leaseRow{}
	}
	return leaseRow{held: true, owner: owner.String, token: fence.Token(token),
		ttl: time.Duration(remaining.Int64) * time.Microsecond, metadata: md.String}
}

// lookupRow reads the lease row of name: acquireLock's second statement
// when the lock is held.
func (b *Backend) lookupRow(ctx context.Context, name string) (leaseRow, error) {
	row, err := b.lookupOn(ctx, b.db, b.lookup, name)
	if err != nil {
		return leaseRow{}, classify(ctx, b.d, b.table, fixMigrate, fmt.Sprintf("inspect %q", name), err)
	}
	return row, nil
}

// lookupOn reads name's row with query (b.lookup, or b.lookup FOR UPDATE)
// on db (b.db, or acquireSet's transaction); its errors are the driver's.
func (b *Backend) lookupOn(ctx context.Context, db execer, query, name string) (leaseRow, error) {
	var (
		owner, md sql.NullString
		token     int64
		remaining sql.NullInt64
	)
	err := db.QueryRowContext(ctx, query, name).Scan(&owner, &token, &remaining, &md)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return leaseRow{}, nil
	case err != nil:
		return leaseRow{}, err
	}
	return liveRow(owner, md, token, remaining), nil
}

// mysqlNewRowToken is the token of a lease row that an acquire inserts on
// MySQL: one above the floor row (name ”) that Sweep and Admin.Bump keep,
// so that a name's tokens keep rising after its row was swept or a backup
// restored. The floor is read through a derived table with an aggregate,
// which is materialized: MySQL refuses a subquery on the table an INSERT
// writes to (error 1093) unless it is. Every acquiring statement (plain and
// queued) uses it.
func mysqlNewRowToken(table string) string {
	return fmt.Sprintf("LAST_INSERT_ID(COALESCE((SELECT `f`.`m` FROM (SELECT MAX(`token`) AS `m` FROM %s WHERE `name` = '') AS `f`), 0) + 1)", table)
}
