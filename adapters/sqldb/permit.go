package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/wake"
	"github.com/fencekit/fencekit/lock"
)

var _ lock.PermitBackend = (*Backend)(nil)

// permitAttempts is how many times AcquirePermit runs its transaction when
// the server ends it for a deadlock or serialization failure, before it
// returns the conflict (Retryable) to the caller.
const permitAttempts = 4

// AcquirePermit takes a permit on name for owner (a semaphore's, or a
// read-write lock's read or write permit), or keeps owner's place in line
// when req.Place > 0, by the rules of lock.PermitBackend.
//
// It is one transaction at the server's default isolation level that
// first locks name's row in the names table (inserting it when missing),
// so that the acquires of one name run one at a time; then reads every
// owner row of name with a locking read, decides in Go, and writes at most
// three statements. MySQL: BEGIN, the insert-or-lock, the locking read,
// then (when something is written) the owner row, name's row and, when
// rows of others have expired, their deletion, and COMMIT: 5 to 7
// statements. PostgreSQL: BEGIN, the insert-or-lock (which returns name's
// row), the locking read, one write, COMMIT: 5 statements. A refusal that
// writes nothing rolls back instead. Expiry is the server's clock.
//
// A deadlock or serialization failure runs the transaction again, up to
// four times in all, and is then a *ConflictError that lock.Retryable
// accepts. Before Migrate created the permit tables it is a
// *NotMigratedError (ErrNotMigrated).
func (b *Backend) AcquirePermit(ctx context.Context, name, owner string, req lock.PermitRequest) (lock.Permit, error) {
	if err := lock.ValidatePermit(name, owner, req); err != nil {
		return lock.Permit{}, err
	}
	if err := b.permitReady(ctx); err != nil {
		return lock.Permit{}, err
	}
	if req.Place > 0 {
		// Before the transaction: a release through this Backend that
		// comes after it commits, even before this call returns, leaves a
		// wake-up for AwaitPermit. A wake-up that lands first only ends a
		// wait early.
		b.pw.register(name, owner, req.Place)
	}
	where := fmt.Sprintf("acquire permit %q", name)
	for attempt := 1; ; attempt++ {
		plan, err := b.acquirePermitOnce(ctx, name, owner, req)
		switch {
		case err != nil && isConflict(err) && attempt < permitAttempts && ctx.Err() == nil:
			// The server undid the transaction: run it again, after a
			// pause of up to a millisecond per attempt, so that the
			// transactions that collided do not collide again.
			_ = wake.Wait(ctx, nil, rand.N(time.Duration(attempt)*time.Millisecond))
			continue
		case err != nil:
			return lock.Permit{}, classify(ctx, b.d, b.pm.names, fixMigrate, where, err)
		case plan.admitted():
			b.pw.forget(name, owner)
			return plan.permit, nil
		}
		return lock.Permit{}, plan.err
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

// acquirePermitOnce runs AcquirePermit's transaction once. The error is
// the driver's; the plan's is the outcome.
func (b *Backend) acquirePermitOnce(ctx context.Context, name, owner string, req lock.PermitRequest) (permitPlan, error) {
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
		n, rows, err = b.readPermits(ctx, tx, b.pm.readLocked, name)
	} else {
		if err := tx.QueryRowContext(ctx, b.pm.lock, name).Scan(&n.kind, &n.limit, &n.token, &n.lastWriter, &n.arrivals); err != nil {
			return permitPlan{}, err
		}
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
		if _, err := tx.ExecContext(ctx, b.pm.putOwner, name, owner, int(r.kind), token, r.prior, r.arrival, ttl.Microseconds()); err != nil {
			return permitPlan{}, err
		}
		if nx != n {
			if _, err := tx.ExecContext(ctx, b.pm.putName, int(nx.kind), nx.limit, nx.token, nx.lastWriter, nx.arrivals, name); err != nil {
				return permitPlan{}, err
			}
		}
	} else {
		if _, err := tx.ExecContext(ctx, b.pm.write, name, owner, int(r.kind), token, r.prior, r.arrival, ttl.Microseconds(),
			int(nx.kind), nx.limit, nx.token, nx.lastWriter, nx.arrivals); err != nil {
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
		)
		if err := rs.Scan(&n.kind, &n.limit, &n.token, &n.lastWriter, &n.arrivals, &owner, &kind, &token, &prior, &arrival, &left); err != nil {
			return permitName{}, nil, err
		}
		if owner.Valid {
			rows = append(rows, permitOwner{owner: owner.String, kind: lock.PermitKind(kind.Int64), token: token.Int64,
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
			left  int64
		)
		if err := rs.Scan(&r.owner, &r.kind, &token, &r.prior, &r.arrival, &left); err != nil {
			return nil, err
		}
		r.token, r.left = token.Int64, time.Duration(left)*time.Microsecond
		rows = append(rows, r)
	}
	return rows, rs.Err()
}

// ExtendPermit renews owner's live permit on name to ttl from now, one
// statement. It never re-creates a permit that expired or was released:
// then it returns an error matching lock.ErrNotHeld and changes nothing.
func (b *Backend) ExtendPermit(ctx context.Context, name, owner string, ttl time.Duration) error {
	if err := lock.ValidateArgs(name, owner, ttl); err != nil {
		return err
	}
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	n, err := b.permitExec(ctx, fmt.Sprintf("extend permit %q", name), b.d == MySQL, b.pm.extend, ttl.Microseconds(), name, owner)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("sqldb: extend permit %q: %w", name, lock.ErrNotHeld)
	}
	return nil
}

// ReleasePermit deletes owner's live permit on name, one statement; the
// token counter in name's row stays. Waiters in line through this Backend
// are woken at once; those of other processes find out at their next
// re-check (see AwaitPermit). When owner holds no live permit it returns
// an error matching lock.ErrNotHeld.
func (b *Backend) ReleasePermit(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
	if err := b.permitReady(ctx); err != nil {
		return err
	}
	n, err := b.permitExec(ctx, fmt.Sprintf("release permit %q", name), false, b.pm.release, name, owner)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("sqldb: release permit %q: %w", name, lock.ErrNotHeld)
	}
	b.pw.wake(name)
	return nil
}

// LeavePermitLine deletes owner's place in name's line, one statement; nil
// when owner has none. The waiters behind it through this Backend are
// woken, since it may let them in.
func (b *Backend) LeavePermitLine(ctx context.Context, name, owner string) error {
	if err := lock.ValidateName(name, owner); err != nil {
		return err
	}
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

// InspectPermits reports name's shape, its live permits with their
// remaining TTLs (on the server's clock), the number of live places in
// line, and its last writer: one read-only statement. An idle name has
// Kind 0.
func (b *Backend) InspectPermits(ctx context.Context, name string) (lock.Permits, error) {
	if name == "" {
		return lock.Permits{}, fence.Invalid("empty lock name")
	}
	if err := fence.ValidateKey(name); err != nil {
		return lock.Permits{}, fmt.Errorf("lock name: %w", err)
	}
	if err := b.permitReady(ctx); err != nil {
		return lock.Permits{}, err
	}
	n, rows, err := b.readPermits(ctx, b.db, b.pm.read, name)
	if err != nil {
		return lock.Permits{}, classify(ctx, b.d, b.pm.names, fixMigrate, fmt.Sprintf("inspect permits %q", name), err)
	}
	out := lock.Permits{Name: name, LastWriter: fence.Token(n.lastWriter)}
	for _, r := range rows {
		switch {
		case !r.live():
		case r.place():
			out.Waiting++
		default:
			out.Holders = append(out.Holders, lock.PermitHolder{Owner: r.owner, Kind: r.kind, Token: fence.Token(r.token), TTL: r.left})
		}
	}
	if len(out.Holders) > 0 || out.Waiting > 0 {
		out.Kind = n.kind
		if n.kind == lock.SemaphorePermit {
			out.Limit = n.limit
		}
	}
	return out, nil
}
