package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgqueue"
	"github.com/fencekit/fencekit/lock/driver"
)

// Backend is a driver.Backend on a PostgreSQL lease table with one row per
// lock name: (name, owner, token, expires_at, metadata), and the tables
// beside it: the lease table's queue table for places in line, and its
// permit tables for semaphores and read-write locks (see Migrate). Use it
// through lock.New.
//
// Expiry is decided by the database clock alone, so clients need no
// synchronised clocks. The token lives in the row and is raised by the same
// statement that grants a lease, so it is durable: it keeps rising across
// releases (which only clear the owner), expiries and server restarts.
// Sweep deletes the rows of idle locks and keeps their tokens in a floor
// row, so a name's tokens rise across sweeps too; do not delete rows by
// hand, or that name's tokens start again from the floor.
//
// Every call on a lock is one statement (an Acquire reads once more only in
// the rare race where its snapshot missed the holder's row), a call on a
// permit name one round trip, and no session state is used: any pooled
// connection will do, and a lease taken on one connection can be extended
// or released on another. The exceptions are a set of names (one
// transaction, see acquireSet in multi.go), the connection that listens for
// the wake-ups of waiters in line (see WakeChannel) and Sweep.
//
// Backend takes a Pool (a *pgxpool.Pool), never a pgx.Tx or a *pgx.Conn:
//
//   - A token is a promise that no other holder ever gets it. A token minted
//     inside a caller's transaction that then rolls back is forgotten, and
//     minted again for the next holder: two holders with one token, and the
//     fenced store accepts both.
//   - A Client uses its Backend from several goroutines at once (a
//     keep-alive renewing one lease while another is acquired), which one
//     *pgx.Conn does not allow ("conn busy", or worse).
//
// So every Backend call runs on a pooled connection and has committed when
// it returns. Store, Guard and UpdateFenced do take a pgx.Tx,
// to make fenced writes part of the caller's transaction.
type Backend struct {
	db                               Pool
	table                            string // sanitized, for messages
	err                              error
	acquire, extend, release, lookup string
	inspect                          string           // lookup, and the number of places in line
	sweepSQL                         sweepSQL         // see Sweep
	acquireQueued, leave             string           // see acquireInLine
	releasePlain                     string           // releaseLock without the queue table
	waker                            *waker           // see awaitTurn
	queue                            string           // the queue table, sanitized, for messages
	unqueued                         pgqueue.Unqueued // waiters polling without the queue table (queue_fallback.go)
	permits                          permitSQL        // see acquirePermit
	permitTable                      string           // the permits' state table, sanitized, for messages
	permitErr                        error            // why this lease table has no permit tables, if so
}

// NewBackend returns a Backend on pool with the lease table named in opts
// (nil for the default fencekit_leases). The table must exist (see
// Migrate). A malformed table name or a nil pool is reported by every
// method as an error matching fence.ErrInvalid.
func NewBackend(pool Pool, opts *Options) *Backend {
	_, table, err := opts.tables()
	var queue string
	if err == nil {
		_, lo := opts.identifiers()
		queue, err = queueTable(lo)
	}
	if err == nil && pool == nil {
		err = fence.Invalid("postgres: nil pool")
	}
	if err != nil {
		return &Backend{err: err}
	}
	// The statements that adapters/sqldb sends too (one line on a shared
	// table); pgx sends a TTL as an interval.
	q := pgqueue.Build(table, queue, "$3::interval", "$5::interval", "$6")
	acquireQueued, release, leave := q.Acquire, q.Release, q.Leave
	_, lo := opts.identifiers()
	pt, permitErr := newPermitTables(lo)
	return &Backend{
		permits:       buildPermitSQL(pt),
		permitTable:   pt.state,
		permitErr:     permitErr,
		acquireQueued: acquireQueued,
		release:       release,
		leave:         leave,
		waker:         newWaker(pool),
		queue:         queue,
		releasePlain: fmt.Sprintf(`UPDATE %s SET owner = NULL, expires_at = statement_timestamp(), metadata = NULL
WHERE name = $1 AND owner = $2 AND expires_at > statement_timestamp()`, table),
		db:    pool,
		table: table,
		// Free (no owner), expired, or already ours: take it. A new holder
		// gets token+1; the same owner re-acquiring a live lease keeps its
		// token and gets the new expiry. statement_timestamp() is one
		// instant for the whole statement, fresh for each statement even
		// inside a long transaction.
		//
		// The holder metadata ($4, NULL for none) is the acquiring call's,
		// also for the same owner's re-acquire.
		//
		// When the upsert takes nothing, the same statement reports the
		// holder's remaining TTL (from the statement's snapshot), so a
		// refused attempt costs one round trip too. No row at all means
		// the snapshot did not see the row the upsert conflicted with.
		//
		// A new row starts above the floor row (name '', see Sweep), which
		// holds the highest token of every swept row.
		acquire: fmt.Sprintf(`WITH taken AS (
    INSERT INTO %[1]s AS l (name, owner, token, expires_at, metadata)
    VALUES ($1, $2, coalesce((SELECT token FROM %[1]s WHERE name = ''), 0) + 1,
            statement_timestamp() + $3::interval, NULLIF($4::text, ''))
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
WHERE h.name = $1 AND h.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taken)`, table),
		extend: fmt.Sprintf(`UPDATE %s SET expires_at = statement_timestamp() + $3::interval
WHERE name = $1 AND owner = $2 AND expires_at > statement_timestamp()`, table),
		lookup: fmt.Sprintf(`SELECT owner, token, expires_at, clock_timestamp(), metadata FROM %s WHERE name = $1`, table),
		// The lease row (if any) and the live places of its queue, on
		// one reading of the clock.
		inspect: fmt.Sprintf(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT l.owner, l.token, l.expires_at, (SELECT t FROM now), l.metadata,
    (SELECT count(*) FROM %[2]s w WHERE w.name = $1 AND w.expires_at > (SELECT t FROM now))
FROM (SELECT 1) one LEFT JOIN %[1]s l ON l.name = $1`, table, queue),
		sweepSQL: sweepStatements(table),
	}
}

// interval converts ttl to an interval parameter in whole microseconds.
func interval(ttl time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: ttl.Microseconds(), Valid: true}
}

// acquireLock takes name for owner for ttl and returns a new token, above
// every token issued for name before; or, when owner already holds it,
// extends the lease to ttl and returns the same token. When another owner
// holds it, the error is a *driver.HeldError with the remaining TTL.
//
// The holder metadata md goes to the row's metadata column as a parameter
// (NULL for ""), replacing what a same-owner acquire stored before; Extend
// keeps it, Release sets it to NULL. The table needs that column: run
// Migrate after upgrading.
func (b *Backend) acquireLock(ctx context.Context, name, owner string, ttl time.Duration, md string) (fence.Token, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	for attempt := 1; ; attempt++ {
		var token, heldMicros *int64
		err := b.db.QueryRow(ctx, b.acquire, name, owner, interval(ttl), md).Scan(&token, &heldMicros)
		switch {
		case err == nil && token != nil:
			return fence.Token(*token), nil
		case err == nil && heldMicros != nil && *heldMicros > 0:
			return 0, &driver.HeldError{Name: name, TTL: time.Duration(*heldMicros) * time.Microsecond}
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return 0, wrapTableErr(b.table, fixMigrate, fmt.Sprintf("acquire %q", name), err)
		}
		// Held by someone else: find out for how long.
		info, err := b.readLock(ctx, name, false)
		if err != nil {
			return 0, err
		}
		if len(info.Holders) > 0 || attempt >= 3 {
			// After repeated races with releases, report the lock as
			// held with an unknown TTL; the client backs off and retries.
			held := &driver.HeldError{Name: name}
			if len(info.Holders) > 0 {
				held.TTL = info.Holders[0].TTL
			}
			return 0, held
		}
		// Released or expired in between: try again.
	}
}

// extendLock renews owner's live lease on name to ttl from now. It never
// re-creates a lease that expired or was released: then, or when another
// owner holds the lock, it returns an error matching driver.ErrNotHeld.
func (b *Backend) extendLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	return b.update(ctx, "extend", b.extend, name, owner, interval(ttl))
}

// releaseLock frees name if owner holds a live lease on it, keeping the
// token so that the next holder's is higher. Otherwise it returns an error
// matching driver.ErrNotHeld and changes nothing.
func (b *Backend) releaseLock(ctx context.Context, name, owner string) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// One statement: the token stays (the next holder gets token+1),
	// expires_at keeps the release time, from which Sweep measures
	// idleness, and the first waiter in line is notified (see
	// internal/pgqueue).
	var released, notified int64
	if err := b.db.QueryRow(ctx, b.release, name, owner).Scan(&released, &notified); err != nil {
		err = wrapTableErr(b.table, fixMigrate, fmt.Sprintf("release %q", name), err)
		if errors.Is(err, ErrNotMigrated) {
			// The statement failed before it ran: no queue table yet (a
			// schema that Migrate has not upgraded), so nobody can wait
			// on it either. Release as before.
			return b.update(ctx, "release", b.releasePlain, name, owner)
		}
		return err
	}
	if released == 0 {
		return fmt.Errorf("postgres: release %q: %w", name, driver.ErrNotHeld)
	}
	return nil
}

func (b *Backend) update(ctx context.Context, op, query string, args ...any) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	name := args[0].(string)
	tag, err := b.db.Exec(ctx, query, args...)
	if err != nil {
		return wrapTableErr(b.table, fixMigrate, fmt.Sprintf("%s %q", op, name), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: %s %q: %w", op, name, driver.ErrNotHeld)
	}
	return nil
}

// inspectLock reports the holder of name, its token, remaining TTL (as the
// database clock sees it) and metadata, and how many live places its queue
// holds, from one statement. A free lock reports no holder. Before Migrate
// has created the queue table nobody can wait: it reads the lease row alone
// and reports nobody waiting.
func (b *Backend) inspectLock(ctx context.Context, name string) (driver.Info, error) {
	if b.err != nil {
		return driver.Info{}, b.err
	}
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	info, err := b.readLock(ctx, name, true)
	if errors.Is(err, ErrNotMigrated) {
		// No queue table (or no lease table, which the lookup reports).
		return b.readLock(ctx, name, false)
	}
	return info, err
}

// readLock reads name's lease row, and with line the number of live places
// in its queue too (the inspect statement; lookup otherwise).
func (b *Backend) readLock(ctx context.Context, name string, line bool) (driver.Info, error) {
	var (
		owner, md *string
		token     *int64
		expires   *time.Time
		now       time.Time
		waiting   int64
	)
	query, dest := b.lookup, []any{&owner, &token, &expires, &now, &md}
	if line {
		query, dest = b.inspect, append(dest, &waiting)
	}
	err := b.db.QueryRow(ctx, query, name).Scan(dest...)
	info := driver.Info{Name: name, Kind: driver.Exclusive}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return info, nil
	case err != nil:
		return driver.Info{}, wrapTableErr(b.table, fixMigrate, fmt.Sprintf("inspect %q", name), err)
	}
	info.Waiting = int(waiting)
	if owner == nil || token == nil || expires == nil || !expires.After(now) {
		return info, nil
	}
	h := driver.Holder{Owner: *owner, Kind: driver.Exclusive, Token: fence.Token(*token), TTL: expires.Sub(now)}
	if md != nil {
		h.Metadata = *md
	}
	info.Holders = []driver.Holder{h}
	return info, nil
}
