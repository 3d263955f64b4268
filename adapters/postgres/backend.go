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
	"github.com/fencekit/fencekit/lock"
)

// Backend is a lock.Backend on a PostgreSQL lease table with one row per
// lock name: (name, owner, token, expires_at, metadata). Use it through
// lock.New.
//
// Expiry is decided by the database clock alone, so clients need no
// synchronised clocks. The token lives in the row and is raised by the same
// statement that grants a lease, so it is durable: it keeps rising across
// releases (which only clear the owner), expiries and server restarts.
// Sweep deletes the rows of idle locks and keeps their tokens in a floor
// row, so a name's tokens rise across sweeps too; do not delete rows by
// hand, or that name's tokens start again from the floor.
//
// Every call is one statement (Acquire reads once more only in the rare race
// where its snapshot missed the holder's row), and no session state is used:
// any pooled connection will do, and a lease taken on one connection can be
// extended or released on another.
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
// So every Backend call is its own statement on a pooled connection,
// committed when it returns. Store, Guard and UpdateFenced do take a pgx.Tx,
// to make fenced writes part of the caller's transaction.
type Backend struct {
	db                               Pool
	table                            string // sanitized, for messages
	err                              error
	acquire, extend, release, lookup string
	sweepSQL                         sweepSQL         // see Sweep
	acquireQueued, leave             string           // see AcquireOrEnqueue
	releasePlain                     string           // Release without the queue table
	waker                            *waker           // see AwaitTurn
	queue                            string           // the queue table, sanitized, for messages
	unqueued                         pgqueue.Unqueued // waiters polling without the queue table (queue_fallback.go)
	permits                          permitSQL        // see AcquirePermit
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
		lookup:   fmt.Sprintf(`SELECT owner, token, expires_at, clock_timestamp(), metadata FROM %s WHERE name = $1`, table),
		sweepSQL: sweepStatements(table),
	}
}

// interval converts ttl to an interval parameter in whole microseconds.
func interval(ttl time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: ttl.Microseconds(), Valid: true}
}

// Acquire takes name for owner for ttl and returns a new token, above every
// token issued for name before; or, when owner already holds it, extends the
// lease to ttl and returns the same token. When another owner holds it, the
// error is a *lock.HeldError with the remaining TTL.
//
// The holder metadata that ctx carries (lock.ContextWithMetadata) goes to
// the row's metadata column as a parameter, replacing what a same-owner
// Acquire stored before; Extend keeps it, Release sets it to NULL. The
// table needs that column: run Migrate after upgrading.
func (b *Backend) Acquire(ctx context.Context, name, owner string, ttl time.Duration) (fence.Token, error) {
	md, err := lock.ValidateAcquire(ctx, name, owner, ttl)
	if err != nil {
		return 0, err
	}
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
			return 0, &lock.HeldError{Name: name, TTL: time.Duration(*heldMicros) * time.Microsecond}
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return 0, wrapTableErr(b.table, fixMigrate, fmt.Sprintf("acquire %q", name), err)
		}
		// Held by someone else: find out for how long.
		info, err := b.inspect(ctx, name)
		if err != nil {
			return 0, err
		}
		if info.Held || attempt >= 3 {
			// After repeated races with releases, report the lock as
			// held with an unknown TTL; the client backs off and retries.
			return 0, &lock.HeldError{Name: name, TTL: info.TTL}
		}
		// Released or expired in between: try again.
	}
}

// Extend renews owner's live lease on name to ttl from now. It never
// re-creates a lease that expired or was released: then, or when another
// owner holds the lock, it returns an error matching lock.ErrNotHeld.
func (b *Backend) Extend(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	return b.update(ctx, "extend", b.extend, name, owner, interval(ttl))
}

// Release frees name if owner holds a live lease on it, keeping the token
// so that the next holder's is higher. Otherwise it returns an error
// matching lock.ErrNotHeld and changes nothing.
func (b *Backend) Release(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
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
		return fmt.Errorf("postgres: release %q: %w", name, lock.ErrNotHeld)
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
		return fmt.Errorf("postgres: %s %q: %w", op, name, lock.ErrNotHeld)
	}
	return nil
}

// Inspect reports the holder of name, its token, remaining TTL (as the
// database clock sees it) and metadata. A free lock reports Held false and
// zero Owner, Token, TTL and Metadata.
func (b *Backend) Inspect(ctx context.Context, name string) (lock.Info, error) {
	if name == "" {
		return lock.Info{}, fence.Invalid("empty lock name")
	}
	if err := fence.ValidateKey(name); err != nil {
		return lock.Info{}, fmt.Errorf("lock name: %w", err)
	}
	if b.err != nil {
		return lock.Info{}, b.err
	}
	if err := ctx.Err(); err != nil {
		return lock.Info{}, err
	}
	return b.inspect(ctx, name)
}

func (b *Backend) inspect(ctx context.Context, name string) (lock.Info, error) {
	var (
		owner, md *string
		token     int64
		expires   *time.Time
		now       time.Time
	)
	err := b.db.QueryRow(ctx, b.lookup, name).Scan(&owner, &token, &expires, &now, &md)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return lock.Info{Name: name}, nil
	case err != nil:
		return lock.Info{}, wrapTableErr(b.table, fixMigrate, fmt.Sprintf("inspect %q", name), err)
	}
	if owner == nil || expires == nil || !expires.After(now) {
		return lock.Info{Name: name}, nil
	}
	info := lock.Info{Name: name, Held: true, Owner: *owner, Token: fence.Token(token), TTL: expires.Sub(now)}
	if md != nil {
		info.Metadata = *md
	}
	return info, nil
}
