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
	"github.com/fencekit/fencekit/lock/driver"
)

// QueuePoll and MaxQueuePoll bound how often the first waiter in line asks
// again whether the lock is free: database/sql offers no wake-up (no
// LISTEN, and MySQL has none), so a waiter re-checks. The first in line
// re-checks QueuePoll after it became first, then a quarter later each time
// up to MaxQueuePoll, so that a short hold is handed over within a few
// milliseconds and a long one costs at most one statement per MaxQueuePoll.
// A waiter n places behind re-checks at about half the time its turn is
// still away (see Backend.Await), and at the latest at its place's
// renewal. Of the waiters for one name through one Backend only the one
// furthest ahead re-checks; the others wait in memory for it to take the
// lock or leave. Waiters still take their turns in arrival order.
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
	// awaitTurn's re-check, a read: the lock's token, whether it is held,
	// and the live places ahead of owner's.
	poll string
	// inspectLock's read: the lease row's owner, token, remaining TTL and
	// metadata (NULL when the name has no row), and the live places in
	// line. Parameters: name, name.
	inspect string
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
		// Parameters: name, then mysqlAhead's owner, name, owner, then
		// name. The lock's token comes with it, for the local line's order
		// (queue_local.go).
		position: fmt.Sprintf("SELECT (SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), `expires_at`) FROM %[1]s WHERE `name` = ? AND `owner` IS NOT NULL),\n"+
			"  (SELECT COUNT(*) FROM (%[2]s) a),\n"+
			"  (SELECT `token` FROM %[1]s WHERE `name` = ?)", leases, mysqlAhead(queue)),
		leave: fmt.Sprintf("DELETE FROM %s WHERE `name` = ? AND `owner` = ?", queue),
		// The lease row joined to one row, so that a name without a row
		// still counts its places.
		inspect: fmt.Sprintf("SELECT l.`owner`, l.`token`, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.`expires_at`), l.`metadata`,\n"+
			"  (SELECT COUNT(*) FROM %[2]s w WHERE w.`name` = ? AND w.`expires_at` > UTC_TIMESTAMP(6))\n"+
			"FROM (SELECT 1 AS `one`) o LEFT JOIN %[1]s l ON l.`name` = ?", leases, queue),
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
		// $1 name, $2 name (the same parameter list as MySQL's).
		inspect: fmt.Sprintf(`SELECT l.owner, l.token, floor(extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, l.metadata,
    (SELECT count(*) FROM %[2]s w WHERE w.name = $1 AND w.expires_at > statement_timestamp())
FROM (SELECT 1) o LEFT JOIN %[1]s l ON l.name = $2`, leases, queue),
		release: q.Release,
		leave:   q.Leave,
	}
}

// waitKey names owner's place in name's queue in the Backend's memory.
func waitKey(name, owner string) string { return name + "\x00" + owner }

// acquireInLine is an Acquire with a place in line: it takes name for
// owner when the lock is free and no live place in its queue is ahead of
// owner's, minting the token exactly as acquireLock does (the same
// statement, with the queue in its condition), or extends owner's own
// lease. Otherwise it keeps owner's place in the queue table for placeTTL
// on the database clock (adding it at the tail when owner has none or its
// place had expired) and returns a *driver.HeldError: with the holder's
// remaining TTL when owner is first in line, 0 otherwise. Expired places
// count for nothing from the moment they expire.
//
// On PostgreSQL it is one statement, which also deletes expired places. On
// MySQL, when nobody waits, it is one statement too (the take, as
// acquireLock's); a refused take adds two autocommit statements (keep
// owner's place, read the position), and a take by an owner that had
// queued through this Backend adds one that deletes its place and the
// expired ones.
//
// Run Migrate after upgrading: until the queue table exists, it falls back
// to acquireLock, which may take a free lock ahead of others, and
// awaitTurn then backs off as a Client's polling does (waiting as before
// queued waiting, unfair but working). A missing lease table is still
// ErrNotMigrated.
func (b *Backend) acquireInLine(ctx context.Context, name, owner string, ttl, placeTTL time.Duration, md string) (fence.Token, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	where := fmt.Sprintf("acquire %q (queued)", name)
	if renewed, err := b.renewBehindLocal(ctx, name, owner, placeTTL); renewed || err != nil {
		if err != nil {
			return 0, classify(ctx, b.d, b.table, fixMigrate, where, err)
		}
		return 0, &driver.HeldError{Name: name} // others are ahead
	}
	for attempt := 1; ; attempt++ {
		var (
			token fence.Token
			held  time.Duration
			ahead int64
			err   error
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
				return b.acquireUnqueued(ctx, name, owner, ttl, md)
			}
			return 0, err
		case token > 0:
			b.forget(name, owner)
			b.unqueued.Forget(waitKey(name, owner))
			return token, nil
		}
		b.unqueued.Forget(waitKey(name, owner)) // in line: re-checks its turn again
		b.pace(name, owner).placed(ahead, placeTTL)
		he := &driver.HeldError{Name: name}
		if ahead == 0 {
			// First in line: the holder's TTL, or (a lock that looked
			// free, released in between) ask again at once.
			he.TTL = max(held, time.Microsecond)
		}
		return 0, he
	}
}

// acquireQueuedPostgres runs the one statement of acquireInLine.
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
	var heldMicros, seen sql.NullInt64
	var ahead int64
	if err := b.db.QueryRowContext(ctx, b.q.position, name, owner, name, owner, name).Scan(&heldMicros, &ahead, &seen); err != nil {
		return 0, 0, 0, err
	}
	// A refused acquire is a re-check too, and may be the only one: a
	// leader of the local line whose pace puts its next re-check past its
	// Await re-checks by its acquires alone. So it watches for a stalled
	// line as awaitTurn's re-checks do; else a waiter first on the server
	// but behind it here would renew its place without ever asking, and
	// nobody would take the free lock.
	held := int64(0) // live holders, as the re-check counts them
	if heldMicros.Valid && heldMicros.Int64 > 0 {
		held = 1
	}
	p := b.pace(name, owner)
	if p.observe(seen.Int64, held, ahead, time.Now()) {
		b.local.stalled(p)
	}
	return 0, time.Duration(heldMicros.Int64) * time.Microsecond, ahead, nil
}

// awaitTurn waits until it is owner's turn (the lock is free and no live
// place is ahead of owner's), max has passed, or ctx ends. database/sql
// offers no wake-up, so it finds out by re-checking with one read-only
// statement: the first waiter in line QueuePoll after it became first,
// then a quarter later each time, up to MaxQueuePoll; a waiter further
// back less often, at about half the time its turn is still away (its
// places ahead times the time per turn, measured from the lock's token as
// it rises between re-checks), and every (n+1)·QueuePoll before it has
// measured that. A failed re-check ends the wait early, so that the
// caller's next acquireInLine reports the failure.
//
// Of the waiters for one name through this Backend, only the one furthest
// ahead re-checks (queue_local.go); the others wait in memory until it
// takes the lock or leaves (then the next one re-checks), at most max. A Release
// through this Backend wakes the re-checking waiter at once. So the
// statements per acquisition stay flat in the waiters of one process.
func (b *Backend) awaitTurn(ctx context.Context, name, owner string, max time.Duration) error {
	if b.err != nil {
		return b.err
	}
	if d, polling := b.unqueued.Backoff(waitKey(name, owner)); polling {
		return wake.Wait(ctx, nil, min(d, max)) // no queue table: back off
	}
	p := b.pace(name, owner)
	p.touch()
	deadline := time.Now().Add(max)
	t := time.NewTimer(max)
	defer t.Stop()
	checkNow := false
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if leads, goneIn := b.local.leads(p); !leads {
			// A waiter ahead, through this Backend, re-checks for both:
			// wait until it hands over, until max, or until it counts as
			// gone (it stopped waiting without a word).
			wait := min(left, goneIn+time.Millisecond)
			t.Reset(wait)
			select {
			case <-p.box:
				if p.takeReask() {
					return nil // the leader found the line stalled: ask again
				}
				checkNow = true // maybe leading now: find out where it stands
				continue
			case <-t.C:
				if wait == left {
					return nil
				}
				checkNow = true
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		wait, last := p.next(), false
		if checkNow {
			wait, checkNow = 0, false
		}
		if wait >= left {
			wait, last = left, true
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-p.box:
			// Released through this Backend, or leading now.
			if p.first() {
				return nil // first in line: take it now
			}
			last = false
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
		if p.observe(token.Int64, held, nAhd, time.Now()) {
			b.local.stalled(p)
		}
		if held == 0 && nAhd == 0 {
			return nil // owner's turn: the caller takes the lock
		}
	}
}

// pace is what a waiter knows of its turn: the places ahead of it, and the
// time per turn measured from the lock's token.
type pace struct {
	name string
	box  chan struct{} // wake-ups from the local line (queue_local.go)

	mu        sync.Mutex
	ahead     int64
	token     int64     // the token last seen
	tokenAt   time.Time // when it was first seen
	perTurn   time.Duration
	hasSample bool
	firstPoll time.Duration // the first in line's next interval; 0 while others are ahead
	joined    bool          // in the local line (localLines.join)
	reask     bool          // woken to ask again (localLines.stalled)
	freeAhead int64         // 1 + the token seen free with others ahead; 0 when not
	freeSince time.Time     // when it was first seen so
	slot      int64         // the token seen plus the places ahead then: the order of the local line (0: unknown)
	full      bool          // the next acquireInLine runs whole (see renewBehindLocal)
	place     time.Duration // the place TTL last asked for
	active    time.Time     // the last acquireInLine or awaitTurn
}

// stallAfter is how long a re-checking waiter sees the lock free with
// others ahead (at the same token) before it wakes the local waiters to ask
// again: twice the longest interval at which a first in line re-checks.
const stallAfter = 2 * MaxQueuePoll

// order is p's place in the local line: the token it saw plus the places
// ahead of it then (the token rises by one, and the places ahead fall by
// one, with each turn, so waiters measured at different times compare).
func (p *pace) order() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slot
}

// pace returns the pace of owner's wait for name, made on first use, when
// owner joins the local line, and forgotten when owner takes the lock or
// leaves the queue (forget).
func (b *Backend) pace(name, owner string) *pace {
	v, loaded := b.waits.LoadOrStore(waitKey(name, owner), &pace{name: name, box: wake.NewBox()})
	p := v.(*pace)
	if !loaded {
		b.local.join(p)
	}
	return p
}

// forget drops owner's pace for name and its place in the local line.
func (b *Backend) forget(name, owner string) {
	if v, ok := b.waits.LoadAndDelete(waitKey(name, owner)); ok {
		b.local.leave(v.(*pace))
	}
}

// placed records the places ahead that acquireInLine reported.
func (p *pace) placed(ahead int64, place time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ahead, p.place, p.active = ahead, place, time.Now()
}

// touch records that owner is waiting now (awaitTurn).
func (p *pace) touch() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = time.Now()
}

// goneIn is how long until gone reports true, if owner does not show up.
func (p *pace) goneIn(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.place == 0 {
		return time.Hour // never asked: not gone by this measure
	}
	return max(p.active.Add(p.place).Sub(now), 0)
}

// gone reports whether owner stopped waiting without saying so: no
// acquireInLine or awaitTurn for longer than its place TTL, when its
// place has expired on the server too.
func (p *pace) gone(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.place > 0 && now.Sub(p.active) > p.place
}

// first reports whether owner was first in line when last seen.
func (p *pace) first() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ahead == 0
}

// takeReask reports, and clears, a request to ask again.
func (p *pace) takeReask() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.reask
	p.reask = false
	p.full = p.full || r
	return r
}

// renewBehindLocal renews owner's place alone, one statement, on MySQL,
// when another waiter through this Backend is ahead of owner (the local
// line's leader): it cannot be owner's turn, so the take and the reading
// of the position, two of the three statements of a refused
// acquireInLine, are skipped. It reports whether it did. Not after the
// leader found the line stalled (the local order may be wrong): then the
// next acquireInLine runs whole.
func (b *Backend) renewBehindLocal(ctx context.Context, name, owner string, placeTTL time.Duration) (bool, error) {
	if b.d != MySQL {
		return false, nil
	}
	v, ok := b.waits.Load(waitKey(name, owner))
	if !ok {
		return false, nil
	}
	p := v.(*pace)
	p.mu.Lock()
	full := p.full
	p.full = false
	p.mu.Unlock()
	if full {
		return false, nil
	}
	if leads, _ := b.local.leads(p); leads {
		return false, nil
	}
	if _, err := b.db.ExecContext(ctx, b.q.place, name, owner, placeTTL.Microseconds()); err != nil {
		return false, err
	}
	p.mu.Lock()
	p.place, p.active = placeTTL, time.Now()
	p.mu.Unlock()
	return true, nil
}

// observe records a re-check: the places ahead, and a new time per turn
// when the token rose since it was first seen. It reports a stall: the
// lock seen free with others ahead twice in a row at the same token (the
// waiter first in line is not re-checking).
func (p *pace) observe(token, held, ahead int64, now time.Time) (stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ahead = ahead
	if token > 0 {
		p.slot = token + ahead
	}
	switch {
	case held != 0 || ahead == 0:
		p.freeAhead = 0
	case p.freeAhead != token+1:
		p.freeAhead, p.freeSince = token+1, now
	case now.Sub(p.freeSince) >= stallAfter:
		// The lock stayed free, with others ahead, for longer than a
		// first in line that re-checks takes to notice.
		p.freeAhead, stalled = 0, true
	}
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
	return stalled
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

// leaveQueue deletes owner's place in name's queue; it is one statement.
// On PostgreSQL it also notifies the next waiter when owner was first in
// line, the lock is free, and that waiter listens (one of
// adapters/postgres on a shared table). Before Migrate created the queue
// table it returns nil: nobody has a place.
func (b *Backend) leaveQueue(ctx context.Context, name, owner string) error {
	if b.err != nil {
		return b.err
	}
	b.forget(name, owner)
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
