package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock/driver"
)

// permitAttempts is how many times acquirePermit runs its transaction when
// the server ends it for a deadlock, lock wait timeout or serialization
// failure, before it returns the conflict (Retryable) to the caller.
const permitAttempts = 4

// acquirePermit takes a permit on req.Name for req.Owner (a semaphore's,
// or a read-write lock's read or write permit), or keeps the owner's place
// in line when req.Place > 0, by the rules of the driver contract.
//
// It is one transaction at the server's default isolation level that
// first locks name's row in the names table (inserting it when missing),
// so that the acquires of one name run one at a time; then reads every
// owner row of name with a locking read, decides in Go, and writes at most
// three statements. MySQL: BEGIN, the insert-or-lock of name's row, the
// claim of the owner's row (see below), the locking read, then (when
// something is written) the owner row, name's row and, when rows of others
// have expired, their deletion, and COMMIT: 6 to 8 statements. PostgreSQL:
// BEGIN, the insert-or-lock (which returns name's row), the locking read,
// one write, COMMIT: 5 statements. A refusal that writes nothing rolls
// back instead. Expiry is the server's clock.
//
// On MySQL the owner's row is claimed (inserted as a placeholder that
// counts for nothing, or locked when it exists) before the locking read,
// because under InnoDB's REPEATABLE READ that read takes gap locks: on
// the gaps between name's rows and, past its last row, on the gap before
// the next name's first row (or the end of the table), which the acquires
// of the next name hold as well. Two transactions that each held that gap
// and then inserted into it deadlocked (error 1213; with 24 acquirers of 8
// names, TestPermitManyNames). Now an acquire's only insert into the
// owners table comes before it holds any gap lock there, and after it
// holds the name's lock, which no other acquire of the name can hold; from
// its locking read on it waits only for row locks of the name's own rows,
// which only single-statement Extend, Release and Leave hold besides it,
// and they wait for nothing else. So no cycle of waits can form
// (TestPermitAcquireLeavesNextNameGap).
//
// A deadlock, lock wait timeout or serialization failure still runs the
// transaction again (processes of an earlier version sharing the tables
// take their locks in the old order), up to four times in all, and is
// then a *ConflictError that driver.Retryable accepts. Each attempt is a
// transaction of its own, rolled back whole before the next (InnoDB has
// rolled back a deadlock's victim; the deferred Rollback undoes the rest
// after a lock wait timeout, which undoes only its statement), so an
// attempt never applies on top of another. Before Migrate created the
// permit tables it is a *NotMigratedError (ErrNotMigrated).
func (b *Backend) acquirePermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	name, owner := req.Name, req.Owner
	if err := b.permitReady(ctx); err != nil {
		return driver.Grant{}, err
	}
	if req.Place > 0 {
		// Before the transaction: a release through this Backend that
		// comes after it commits, even before this call returns, leaves a
		// wake-up for awaitPermit. A wake-up that lands first only ends a
		// wait early.
		b.pw.register(name, owner, req.Place)
	}
	where := fmt.Sprintf("acquire permit %q", name)
	for attempt := 1; ; attempt++ {
		plan, err := b.acquirePermitOnce(ctx, req)
		switch {
		case err != nil && isConflict(err) && attempt < permitAttempts && ctx.Err() == nil:
			// The server undid the transaction: run it again, after a
			// pause of up to a millisecond per attempt, so that the
			// transactions that collided do not collide again.
			_ = wake.Wait(ctx, nil, rand.N(time.Duration(attempt)*time.Millisecond))
			continue
		case err != nil:
			return driver.Grant{}, classify(ctx, b.d, b.pm.names, fixMigrate, where, err)
		case plan.admitted():
			b.pw.forget(name, owner)
			return plan.grant, nil
		}
		return driver.Grant{}, plan.err
	}
}

// permitReady returns the error every permit call returns before it sends
// anything: the Backend's own, a permit table name that does not fit, an
// ended ctx.
func (b *Backend) permitReady(ctx context.Context) error {
	switch {
	case b.err != nil:
		return b.err
	case b.pm.err != nil:
		return b.pm.err
	}
	return ctx.Err()
}

// acquirePermitOnce runs acquirePermit's transaction once. The error is
// the driver's; the plan's is the outcome.
func (b *Backend) acquirePermitOnce(ctx context.Context, req driver.Request) (permitPlan, error) {
	name, owner := req.Name, req.Owner
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return permitPlan{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	var (
		n    permitName
		rows []permitOwner
	)
	if b.d == MySQL {
		if _, err := tx.ExecContext(ctx, b.pm.lock, name); err != nil {
			return permitPlan{}, err
		}
		if _, err := tx.ExecContext(ctx, b.pm.claim, name, owner); err != nil {
			return permitPlan{}, err
		}
		n, rows, err = b.readPermits(ctx, tx, b.pm.readLocked, name)
	} else {
		var kind int64
		if err := tx.QueryRowContext(ctx, b.pm.lock, name).Scan(&kind, &n.limit, &n.token, &n.lastWriter, &n.arrivals); err != nil {
			return permitPlan{}, err
		}
		n.kind = codeKind(kind)
		rows, err = scanOwners(tx.QueryContext(ctx, b.pm.readLocked, name))
	}
	if err != nil {
		return permitPlan{}, err
	}
	plan := planPermit(name, owner, n, rows, req)
	if !plan.write {
		return plan, nil // nothing to write: roll back
	}
	ttl := req.TTL
	var token sql.NullInt64
	if plan.row.token != 0 {
		token = sql.NullInt64{Int64: plan.row.token, Valid: true}
	} else {
		ttl = req.Place
	}
	r, nx := plan.row, plan.next
	if b.d == MySQL {
		if plan.expired {
			if _, err := tx.ExecContext(ctx, b.pm.dropExpired, name, owner); err != nil {
				return permitPlan{}, err
			}
		}
		if _, err := tx.ExecContext(ctx, b.pm.putOwner, name, owner, kindCode(r.kind), token, r.prior, r.arrival, ttl.Microseconds()); err != nil {
			return permitPlan{}, err
		}
		if nx != n {
			if _, err := tx.ExecContext(ctx, b.pm.putName, kindCode(nx.kind), nx.limit, nx.token, nx.lastWriter, nx.arrivals, name); err != nil {
				return permitPlan{}, err
			}
		}
	} else {
		if _, err := tx.ExecContext(ctx, b.pm.write, name, owner, kindCode(r.kind), token, r.prior, r.arrival, ttl.Microseconds(),
			kindCode(nx.kind), nx.limit, nx.token, nx.lastWriter, nx.arrivals); err != nil {
			return permitPlan{}, err
		}
	}
	return plan, tx.Commit()
}

// readPermits runs query (read or MySQL's readLocked) and returns name's
// row and its owner rows; a name without a row is a zero permitName.
func (b *Backend) readPermits(ctx context.Context, q querier, query, name string) (permitName, []permitOwner, error) {
	rs, err := q.QueryContext(ctx, query, name)
	if err != nil {
		return permitName{}, nil, err
	}
	defer rs.Close()
	var (
		n    permitName
		rows []permitOwner
	)
	for rs.Next() {
		var (
			owner                       sql.NullString
			kind, token, prior, arrival sql.NullInt64
			left                        sql.NullInt64
			nameKind                    int64
		)
		if err := rs.Scan(&nameKind, &n.limit, &n.token, &n.lastWriter, &n.arrivals, &owner, &kind, &token, &prior, &arrival, &left); err != nil {
			return permitName{}, nil, err
		}
		n.kind = codeKind(nameKind)
		if owner.Valid {
			rows = append(rows, permitOwner{owner: owner.String, kind: codeKind(kind.Int64), token: token.Int64,
				prior: prior.Int64, arrival: arrival.Int64, left: time.Duration(left.Int64) * time.Microsecond})
		}
	}
	return n, rows, rs.Err()
}

// scanOwners reads PostgreSQL's locked owner rows.
func scanOwners(rs *sql.Rows, err error) ([]permitOwner, error) {
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var rows []permitOwner
	for rs.Next() {
		var (
			r     permitOwner
			token sql.NullInt64
			kind  int64
			left  int64
		)
		if err := rs.Scan(&r.owner, &kind, &token, &r.prior, &r.arrival, &left); err != nil {
			return nil, err
		}
		r.kind, r.token, r.left = codeKind(kind), token.Int64, time.Duration(left)*time.Microsecond
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// extendPermit renews owner's live permit on name to ttl from now, one
// statement. It never re-creates a permit that expired or was released:
// then it returns an error matching driver.ErrNotHeld and changes nothing.
func (b *Backend) extendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	n, err := b.permitExec(ctx, fmt.Sprintf("extend permit %q", name), b.d == MySQL, b.pm.extend, ttl.Microseconds(), name, owner)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("sqldb: extend permit %q: %w", name, driver.ErrNotHeld)
	}
	return nil
}

// releasePermit deletes owner's live permit on name, one statement; the
// token counter in name's row stays. Waiters in line through this Backend
// are woken at once; those of other processes find out at their next
// re-check (see awaitPermit). When owner holds no live permit it returns
// an error matching driver.ErrNotHeld.
func (b *Backend) releasePermit(ctx context.Context, name, owner string) error {
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	n, err := b.permitExec(ctx, fmt.Sprintf("release permit %q", name), false, b.pm.release, name, owner)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("sqldb: release permit %q: %w", name, driver.ErrNotHeld)
	}
	b.pw.wake(name)
	return nil
}

// leavePermitLine deletes owner's place in name's line, one statement; nil
// when owner has none. The waiters behind it through this Backend are
// woken, since it may let them in.
func (b *Backend) leavePermitLine(ctx context.Context, name, owner string) error {
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	b.pw.forget(name, owner)
	n, err := b.permitExec(ctx, fmt.Sprintf("leave the permit line of %q", name), false, b.pm.leave, name, owner)
	if err != nil {
		return err
	}
	if n > 0 {
		b.pw.wake(name)
	}
	return nil
}

// permitExec runs one autocommit statement and returns the rows it
// matched: the reply's LAST_INSERT_ID when byID (MySQL's UPDATE, whose
// affected-rows count depends on CLIENT_FOUND_ROWS), else the affected
// rows. A conflict runs it again, up to three times.
func (b *Backend) permitExec(ctx context.Context, where string, byID bool, query string, args ...any) (int64, error) {
	for attempt := 1; ; attempt++ {
		res, err := b.db.ExecContext(ctx, query, args...)
		if err == nil {
			if byID {
				return res.LastInsertId()
			}
			return res.RowsAffected()
		}
		if isConflict(err) && attempt < 3 && ctx.Err() == nil {
			continue
		}
		return 0, classify(ctx, b.d, b.pm.owners, fixMigrate, where, err)
	}
}

// inspectPermits reports the permit name's shape, its live permits with
// their remaining TTLs (on the server's clock), the number of live places
// in line, and its last writer: one read-only statement. An idle name has
// Kind 0. Permits keep no metadata.
func (b *Backend) inspectPermits(ctx context.Context, name string) (driver.Info, error) {
	if err := b.permitReady(ctx); err != nil {
		return driver.Info{}, err
	}
	n, rows, err := b.readPermits(ctx, b.db, b.pm.read, name)
	if err != nil {
		return driver.Info{}, classify(ctx, b.d, b.pm.names, fixMigrate, fmt.Sprintf("inspect permits %q", name), err)
	}
	out := driver.Info{Name: name, LastWriter: fence.Token(n.lastWriter)}
	for _, r := range rows {
		switch {
		case !r.live():
		case r.place():
			out.Waiting++
		default:
			out.Holders = append(out.Holders, driver.Holder{Owner: r.owner, Kind: r.kind, Token: fence.Token(r.token), TTL: r.left})
		}
	}
	if len(out.Holders) > 0 || out.Waiting > 0 {
		out.Kind = n.kind
		if n.kind == driver.Semaphore {
			out.Limit = n.limit
		}
	}
	return out, nil
}
