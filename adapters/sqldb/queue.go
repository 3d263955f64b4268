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
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.QueueBackend = (*Backend)(nil)

// QueuePoll and MaxQueuePoll bound how often the first waiter in line asks
// again whether the lock is free: database/sql offers no wake-up (no
// LISTEN, and MySQL has none), so a waiter re-checks. The first in line
// re-checks QueuePoll after it became first, then a quarter later each time
// up to MaxQueuePoll, so that a short hold is handed over within a few
// milliseconds and a long one costs at most one statement per MaxQueuePoll.
// A waiter n places behind re-checks at about half the time its turn is
// still away (see Backend.AwaitTurn), and at the latest at its place's
// renewal. Waiters still take their turns in arrival order.
const (
	QueuePoll    = 2 * time.Millisecond
	MaxQueuePoll = 20 * time.Millisecond
)

// queueIdentifier is the queue table that goes with the lease table
// leases: the same database or schema, the lease table's name with
// "_queue" appended.
func queueIdentifier(leases Identifier) Identifier {
	q := append(Identifier{}, leases...)
	q[len(q)-1] += "_queue"
	return q
}

// queueTableSQL creates the queue table: one row per waiter, ordered by
// (queued_at, owner), ignored and eventually deleted once its place expires
// (expires_at, on the database clock). On PostgreSQL it is the table of
// adapters/postgres, whose channel column names a waiter's LISTEN channel
// (NULL for the waiters of this package, which poll).
func queueTableSQL(d Dialect, queue string) string {
	if d == MySQL {
		return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
			"    `name`       VARBINARY(1024) NOT NULL,\n"+
			"    `owner`      VARBINARY(1024) NOT NULL,\n"+
			"    `queued_at`  DATETIME(6) NOT NULL,\n"+
			"    `expires_at` DATETIME(6) NOT NULL,\n"+
			"    PRIMARY KEY (`name`, `owner`)\n"+
			") ENGINE=InnoDB ROW_FORMAT=DYNAMIC", queue)
	}
	return pgqueue.Table(queue)
}

// queueSQL holds the statements of queued waiting.
type queueSQL struct {
	// PostgreSQL: one statement (see adapters/postgres); MySQL: the take
	// statement, Acquire's with the queue in its condition.
	acquire string
	// MySQL only, run when take took nothing: keep owner's place, read the
	// holder's TTL and the places ahead.
	place, position string
	// MySQL only, run when an owner that had queued took the lock: its
	// place goes, and expired places with it (every statement ignores
	// them until then).
	took string
	// AwaitTurn's re-check, a read: the lock's token, whether it is held,
	// and the live places ahead of owner's.
	poll string
	// Owner's place goes (on PostgreSQL, notifying the next waiter if it
	// listens and the lock is free).
	leave string
	// PostgreSQL: Release with a NOTIFY to the first waiter in line when it
	// listens (a waiter of adapters/postgres on a shared table).
	release string
}

func newQueueSQL(d Dialect, leases, queue string) queueSQL {
	if d == MySQL {
		return mysqlQueueSQL(leases, queue)
	}
	return postgresQueueSQL(leases, queue)
}

// mysqlAhead selects the live places ahead of owner's in name's queue, or
// all live places of others when owner has none. Parameters: owner, name,
// owner.
func mysqlAhead(queue string) string {
	return fmt.Sprintf("SELECT 1 FROM %[1]s w LEFT JOIN %[1]s m\n"+
		"    ON m.`name` = w.`name` AND m.`owner` = ? AND m.`expires_at` > UTC_TIMESTAMP(6)\n"+
		"  WHERE w.`name` = ? AND w.`owner` <> ? AND w.`expires_at` > UTC_TIMESTAMP(6)\n"+
		"    AND (m.`owner` IS NULL OR w.`queued_at` < m.`queued_at` OR (w.`queued_at` = m.`queued_at` AND w.`owner` < m.`owner`))", queue)
}

func mysqlQueueSQL(leases, queue string) queueSQL {
	// Acquire's statement (see NewBackend) with one change: a free or
	// expired lock is taken only when no live place is ahead of owner's.
	// The condition is written four times (once per assignment), each time
	// with its own three parameters: owner, name, owner.
	take := "((`owner` = VALUES(`owner`) AND `expires_at` > UTC_TIMESTAMP(6)) OR ((`owner` IS NULL OR `expires_at` <= UTC_TIMESTAMP(6)) AND NOT EXISTS (" + mysqlAhead(queue) + ")))"
	return queueSQL{
		acquire: fmt.Sprintf("INSERT INTO %[1]s (`name`, `owner`, `token`, `expires_at`, `metadata`)\n"+
			"VALUES (?, ?, %[3]s, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULLIF(?, ''))\n"+
			"ON DUPLICATE KEY UPDATE\n"+
			"  `token` = IF(%[2]s,\n"+
			"    LAST_INSERT_ID(IF(`owner` = VALUES(`owner`) AND `expires_at` > UTC_TIMESTAMP(6), `token`, `token` + 1)),\n"+
			"    `token` + LAST_INSERT_ID(0 * `token`)),\n"+
			"  `metadata` = IF(%[2]s, VALUES(`metadata`), `metadata`),\n"+
			"  `owner` = IF(%[2]s, VALUES(`owner`), `owner`),\n"+
			"  `expires_at` = IF(%[2]s, VALUES(`expires_at`), `expires_at`)", leases, take, mysqlNewRowToken(leases)),
		took: fmt.Sprintf("DELETE FROM %s WHERE `name` = ? AND (`owner` = ? OR `expires_at` <= UTC_TIMESTAMP(6))", queue),
		// queued_at is assigned first, from the old expiry: an expired
		// place goes to the tail.
		place: fmt.Sprintf("INSERT INTO %s (`name`, `owner`, `queued_at`, `expires_at`)\n"+
			"VALUES (?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)\n"+
			"ON DUPLICATE KEY UPDATE\n"+
			"  `queued_at` = IF(`expires_at` <= UTC_TIMESTAMP(6), VALUES(`queued_at`), `queued_at`),\n"+
			"  `expires_at` = VALUES(`expires_at`)", queue),
		position: fmt.Sprintf("SELECT (SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), `expires_at`) FROM %s WHERE `name` = ? AND `owner` IS NOT NULL),\n"+
			"  (SELECT COUNT(*) FROM (%s) a)", leases, mysqlAhead(queue)),
		leave: fmt.Sprintf("DELETE FROM %s WHERE `name` = ? AND `owner` = ?", queue),
		// Parameters: name, name, then mysqlAhead's owner, name, owner.
		poll: fmt.Sprintf("SELECT (SELECT `token` FROM %[1]s WHERE `name` = ?),\n"+
			"  (SELECT COUNT(*) FROM %[1]s WHERE `name` = ? AND `owner` IS NOT NULL AND `expires_at` > UTC_TIMESTAMP(6)),\n"+
			"  (SELECT COUNT(*) FROM (%[2]s) a)", leases, mysqlAhead(queue)),
	}
}

func postgresQueueSQL(leases, queue string) queueSQL {
	// The statements of adapters/postgres (one line on a shared table),
	// the TTLs passed as microseconds. These waiters poll: their places
	// name no channel.
	q := pgqueue.Build(leases, queue, "$3 * interval '1 microsecond'", "$5 * interval '1 microsecond'", "NULL")
	return queueSQL{
		acquire: q.Acquire,
		// $1 name, $2 owner.
		poll: fmt.Sprintf(`SELECT (SELECT token FROM %[1]s WHERE name = $1),
    (SELECT count(*) FROM %[1]s WHERE name = $1 AND owner IS NOT NULL AND expires_at > statement_timestamp()),
    (%[2]s)`, leases, q.Ahead),
		release: q.Release,
		leave:   q.Leave,
	}
}

// waitKey names owner's place in name's queue in the Backend's memory.
func waitKey(name, owner string) string { return name + "\x00" + owner }

// AcquireOrEnqueue takes name for owner when the lock is free and no live
// place in its queue is ahead of owner's, minting the token exactly as
// Acquire does (the same statement, with the queue in its condition), or
// extends owner's own lease. Otherwise it keeps owner's place in the queue
// table for placeTTL on the database clock (adding it at the tail when
// owner has none or its place had expired) and returns a *lock.HeldError:
// with the holder's remaining TTL when owner is first in line, 0
// otherwise. Expired places count for nothing from the moment they expire.
//
// On PostgreSQL it is one statement, which also deletes expired places. On
// MySQL, when nobody waits, it is one statement too (the take, as
// Acquire); a refused take adds two autocommit statements (keep owner's
// place, read the position), and a take by an owner that had queued
// through this Backend adds one that deletes its place and the expired
// ones.
//
// Run Migrate after upgrading: until the queue table exists, it falls back
// to a plain Acquire, which may take a free lock ahead of others, and
// AwaitTurn then backs off as a Client's polling does (waiting as before
// queued waiting, unfair but working). A missing lease table is still
// ErrNotMigrated.
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
	where := fmt.Sprintf("acquire %q (queued)", name)
	for attempt := 1; ; attempt++ {
		var (
			token fence.Token
			held  time.Duration
			ahead int64
		)
		if b.d == MySQL {
			token, held, ahead, err = b.acquireQueuedMySQL(ctx, name, owner, ttl, placeTTL, md)
		} else {
			token, held, ahead, err = b.acquireQueuedPostgres(ctx, name, owner, ttl, placeTTL, md)
		}
		switch {
		case err != nil && isConflict(err) && attempt < 3 && ctx.Err() == nil:
			continue // the statement was undone whole: run it again
		case err != nil:
			err = classify(ctx, b.d, b.table, fixMigrate, where, err)
			if errors.Is(err, ErrNotMigrated) {
				// No queue table yet: poll, as a Backend without queued
				// waiting does (queue_fallback.go).
				return b.acquireUnqueued(ctx, name, owner, ttl)
			}
			return 0, err
		case token > 0:
			b.waits.Delete(waitKey(name, owner))
			b.unqueued.Forget(waitKey(name, owner))
			return token, nil
		}
		b.unqueued.Forget(waitKey(name, owner)) // in line: re-checks its turn again
		b.pace(name, owner).placed(ahead)
		he := &lock.HeldError{Name: name}
		if ahead == 0 {
			// First in line: the holder's TTL, or (a lock that looked
			// free, released in between) ask again at once.
			he.TTL = max(held, time.Microsecond)
		}
		return 0, he
	}
}

// acquireQueuedPostgres runs the one statement of AcquireOrEnqueue.
func (b *Backend) acquireQueuedPostgres(ctx context.Context, name, owner string, ttl, placeTTL time.Duration, md string) (fence.Token, time.Duration, int64, error) {
	var token, heldMicros, ahead sql.NullInt64
	err := b.db.QueryRowContext(ctx, b.q.acquire, name, owner, ttl.Microseconds(), md, placeTTL.Microseconds()).
		Scan(&token, &heldMicros, &ahead)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, 0, 0, nil
	case err != nil:
		return 0, 0, 0, err
	case token.Valid:
		return fence.Token(token.Int64), 0, 0, nil
	}
	return 0, time.Duration(heldMicros.Int64) * time.Microsecond, ahead.Int64, nil
}

// acquireQueuedMySQL runs the take statement, then, when it took nothing,
// keeps owner's place and reads its position.
func (b *Backend) acquireQueuedMySQL(ctx context.Context, name, owner string, ttl, placeTTL time.Duration, md string) (fence.Token, time.Duration, int64, error) {
	args := []any{name, owner, ttl.Microseconds(), md}
	for range 4 {
		args = append(args, owner, name, owner)
	}
	res, err := b.db.ExecContext(ctx, b.q.acquire, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, 0, 0, err
	}
	key := waitKey(name, owner)
	if id > 0 {
		if _, queued := b.waits.Load(key); queued {
			// Best effort: a place left behind expires with its TTL.
			_, _ = b.db.ExecContext(ctx, b.q.took, name, owner)
		}
		return fence.Token(id), 0, 0, nil
	}
	if _, err := b.db.ExecContext(ctx, b.q.place, name, owner, placeTTL.Microseconds()); err != nil {
		return 0, 0, 0, err
	}
	var heldMicros sql.NullInt64
	var ahead int64
	if err := b.db.QueryRowContext(ctx, b.q.position, name, owner, name, owner).Scan(&heldMicros, &ahead); err != nil {
		return 0, 0, 0, err
	}
	return 0, time.Duration(heldMicros.Int64) * time.Microsecond, ahead, nil
}

// AwaitTurn waits until it is owner's turn (the lock is free and no live
// place is ahead of owner's), max has passed, or ctx ends. database/sql
// offers no wake-up, so it finds out by re-checking with one read-only
// statement: the first waiter in line QueuePoll after it became first,
// then a quarter later each time, up to MaxQueuePoll; a waiter further
// back less often, at about half the time its turn is still away (its
// places ahead times the time per turn, measured from the lock's token as
// it rises between re-checks), and every (n+1)·QueuePoll before it has
// measured that. A failed re-check ends the wait early, so that the
// caller's next AcquireOrEnqueue reports the failure.
func (b *Backend) AwaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	if d, polling := b.unqueued.Backoff(waitKey(name, owner)); polling {
		return wake.Wait(ctx, nil, min(d, max)) // no queue table: back off
	}
	p := b.pace(name, owner)
	deadline := time.Now().Add(max)
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		wait, last := p.next(), false
		if left := time.Until(deadline); wait >= left {
			wait, last = left, true
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if last {
			return nil
		}
		var (
			token      sql.NullInt64
			held, nAhd int64
		)
		args := []any{name, name, owner, name, owner}
		if b.d == PostgreSQL {
			args = []any{name, owner}
		}
		if err := b.db.QueryRowContext(ctx, b.q.poll, args...).Scan(&token, &held, &nAhd); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		}
		p.observe(token.Int64, nAhd, time.Now())
		if held == 0 && nAhd == 0 {
			return nil // owner's turn: the caller takes the lock
		}
	}
}

// pace is what a waiter knows of its turn: the places ahead of it, and the
// time per turn measured from the lock's token.
type pace struct {
	mu        sync.Mutex
	ahead     int64
	token     int64     // the token last seen
	tokenAt   time.Time // when it was first seen
	perTurn   time.Duration
	hasSample bool
	firstPoll time.Duration // the first in line's next interval; 0 while others are ahead
}

// pace returns the pace of owner's wait for name, made on first use and
// forgotten when owner takes the lock or leaves the queue.
func (b *Backend) pace(name, owner string) *pace {
	v, _ := b.waits.LoadOrStore(waitKey(name, owner), &pace{})
	return v.(*pace)
}

// placed records the places ahead that AcquireOrEnqueue reported.
func (p *pace) placed(ahead int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ahead = ahead
}

// observe records a re-check: the places ahead, and a new time per turn
// when the token rose since it was first seen.
func (p *pace) observe(token, ahead int64, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ahead = ahead
	switch {
	case p.tokenAt.IsZero() || token < p.token:
		p.token, p.tokenAt = token, now
	case token > p.token:
		sample := now.Sub(p.tokenAt) / time.Duration(token-p.token)
		if p.hasSample {
			sample = (p.perTurn + sample) / 2
		}
		p.perTurn, p.hasSample = sample, true
		p.token, p.tokenAt = token, now
	}
}

// next is how long to wait before the next re-check.
func (p *pace) next() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ahead > 0 {
		p.firstPoll = 0
	}
	switch {
	case p.ahead == 0:
		d := max(p.firstPoll, QueuePoll)
		p.firstPoll = min(d+d/4, MaxQueuePoll)
		return d
	case p.hasSample:
		return max(QueuePoll, time.Duration(p.ahead)*p.perTurn/2)
	}
	return time.Duration(p.ahead+1) * QueuePoll
}

// LeaveQueue deletes owner's place in name's queue; it is one statement.
// On PostgreSQL it also notifies the next waiter when owner was first in
// line, the lock is free, and that waiter listens (one of
// adapters/postgres on a shared table). Before Migrate created the queue
// table it returns nil: nobody has a place.
func (b *Backend) LeaveQueue(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	b.waits.Delete(waitKey(name, owner))
	b.unqueued.Forget(waitKey(name, owner))
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	if b.d == MySQL {
		_, err = b.db.ExecContext(ctx, b.q.leave, name, owner)
	} else {
		var n int64
		err = b.db.QueryRowContext(ctx, b.q.leave, name, owner).Scan(&n)
	}
	if err != nil {
		err = classify(ctx, b.d, b.table, fixMigrate, fmt.Sprintf("leave the queue of %q", name), err)
		if errors.Is(err, ErrNotMigrated) {
			return nil // no queue table: nobody has a place to give up
		}
		return err
	}
	return nil
}
