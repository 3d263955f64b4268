// Package postgres keeps fencekit's locks and fenced data in PostgreSQL,
// over pgx v5.
//
// Which part takes what, and why:
//
//   - Backend is a driver.Backend (lock/driver) on a lease table, for a
//     lock.Client: locks, places in line, sets of locks, semaphores and
//     read-write locks. It takes a Pool (a *pgxpool.Pool), never a pgx.Tx
//     or a *pgx.Conn: a token minted in a
//     transaction that rolls back would be minted again for the next holder
//     (two holders, one token), and a lock.Client calls its Backend from
//     several goroutines at once, which one connection cannot serve. Expiry
//     is decided by the database clock, and each lock's token lives in its
//     row, raised in the statement that grants the lease, so tokens keep
//     rising across releases, expiries and server restarts. Backend.Sweep
//     deletes idle lease rows and keeps their tokens in a floor row, so they
//     rise across sweeps too.
//   - Store is a fence.Store on a table (key, value, fence). It takes a DB:
//     a pool, a *pgx.Conn, or a pgx.Tx to make its writes part of the
//     caller's transaction. Every write is one INSERT ... ON CONFLICT
//     statement that compares the token with the row's fence and writes in
//     the same step.
//   - Guard fences the caller's own transaction (a pgx.Tx) on its own
//     tables: Check raises a resource's fence inside the transaction and
//     holds the row lock until commit, or reports a stale token so that the
//     caller rolls back.
//   - UpdateFenced is the version-column recipe: one fenced UPDATE of one of
//     the caller's rows, on a pool or a pgx.Tx, with a composite key and an
//     optional Where condition if needed. For a read-modify-write, raise the
//     fence first (UpdateFenced with nothing to set), then read, then write:
//     see docs/postgres.md.
//
// Create the tables with Migrate, or with the SQL in docs/postgres.md.
// Everything works under the default READ COMMITTED isolation. Under
// REPEATABLE READ or SERIALIZABLE a concurrent change can abort the caller's
// transaction; such failures come back as a *ConflictError matching
// ErrConflict, never as a silent success, and the caller retries the whole
// transaction.
//
// Driver errors that a retry may cure (lost connections, timeouts,
// conflicts, a server starting or shutting down) are marked with
// driver.Transient, so that lock.Client retries them; all others (a missing
// table, a failed login) are permanent and fail fast.
//
// No session state is used: each call on a lock is one statement (two on a
// refusal that raced a release), so any connection of a pool will do. The
// exceptions: while someone waits in line (Backend.Await), the Backend
// keeps one connection out of the pool that LISTENs for the wake-ups that
// releases send with NOTIFY. A set of names (Backend.Acquire with
// Request.Names) is one transaction. The semaphores and read-write locks
// (the permit kinds of a Request or Claim) send a batch of two statements
// per call, one round trip, run as one implicit transaction: the first
// locks the name's row, so that the second decides on what the previous
// holder of that lock committed. Backend.Sweep, a maintenance call, is a
// short transaction per batch of rows. Pool lists the calls that take a
// connection of their own.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/pgqueue"
	"github.com/fencekit/fencekit/lock/driver"
)

// DB is what Store, Guard, UpdateFenced and Migrate need of a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it. Pass a pgx.Tx to run a
// call inside your own transaction. Backend needs a Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Pool is what Backend and Admin need: a pool of connections, on which
// every statement takes a connection of its own and commits on its own.
// *pgxpool.Pool satisfies it; pgx.Tx and *pgx.Conn do not, on purpose (see
// Backend). Acquire is what sets a pool apart from a transaction or a
// single connection. These calls use it, each for a connection of its own
// that goes back to the pool when the call returns, but for the listening
// one:
//
//   - Backend.Acquire of a set of names (Request.Names): its transaction.
//   - Backend.Acquire, Extend, Release and Leave of a permit (kind
//     Semaphore, Read or Write): their batch of two statements.
//   - Backend.Await of an owner in line (for a lock or a permit) while the
//     Backend has no listening connection: the connection that LISTENs for
//     wake-ups (see Backend.WakeChannel), taken out of the pool
//     (pgxpool.Conn.Hijack) and kept until none of the Backend's waiters
//     has waited for 30 seconds, or the server ends it.
//   - Backend.Sweep: a transaction per batch of rows.
//   - Admin.Bump: its transaction.
//
// Every other call (Backend.Inspect; Backend.Acquire, Extend, Release and
// Leave of a lock; Backend.Await once the listening connection is open;
// Admin.List and Admin.Waiters) sends its statements through the pool's
// QueryRow, Query or Exec, on whichever connection the pool gives it.
type Pool interface {
	DB
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

var (
	_ Pool = (*pgxpool.Pool)(nil)
	_ DB   = (*pgxpool.Pool)(nil)
	_ DB   = (*pgx.Conn)(nil)
	_ DB   = (pgx.Tx)(nil)

	_ fence.Store = (*Store)(nil)
)

// Default table names.
const (
	DefaultStoreTable = "fencekit_store"
	DefaultLeaseTable = "fencekit_leases"
)

// Options configures where the tables live. A nil *Options means the
// defaults.
type Options struct {
	// StoreTable is the table of Store and Guard, optionally
	// schema-qualified: pgx.Identifier{"app", "fences"}. Default
	// fencekit_store, found through the connection's search_path.
	StoreTable pgx.Identifier
	// LeaseTable is the table of Backend; default fencekit_leases.
	LeaseTable pgx.Identifier
}

// identifiers returns the two table names with the defaults applied.
func (o *Options) identifiers() (store, leases pgx.Identifier) {
	if o != nil {
		store, leases = o.StoreTable, o.LeaseTable
	}
	if len(store) == 0 {
		store = pgx.Identifier{DefaultStoreTable}
	}
	if len(leases) == 0 {
		leases = pgx.Identifier{DefaultLeaseTable}
	}
	return store, leases
}

// tables returns the sanitized table names, or an error matching
// fence.ErrInvalid for a malformed identifier or for one table named as
// both (Backend's statements fail on a store table, and the reverse).
func (o *Options) tables() (store, leases string, err error) {
	so, lo := o.identifiers()
	if store, err = tableName(so); err != nil {
		return "", "", fmt.Errorf("postgres: StoreTable: %w", err)
	}
	if leases, err = tableName(lo); err != nil {
		return "", "", fmt.Errorf("postgres: LeaseTable: %w", err)
	}
	if store == leases {
		return "", "", sameTable(store)
	}
	if queue, err := queueTable(lo); err == nil && queue == store {
		return "", "", fence.Invalid("postgres: StoreTable %s is the queue table of LeaseTable %s; name it otherwise", store, leases)
	}
	if pt, err := newPermitTables(lo); err == nil && (pt.state == store || pt.holders == store || pt.places == store) {
		return "", "", fence.Invalid("postgres: StoreTable %s is a permit table of LeaseTable %s; name it otherwise", store, leases)
	}
	return store, leases, nil
}

func sameTable(name string) error {
	return fence.Invalid("postgres: StoreTable and LeaseTable are both %s; the Store and the Backend need a table each", name)
}

// tableName sanitizes id as a table name.
func tableName(id pgx.Identifier) (string, error) {
	if len(id) == 0 {
		return "", fence.Invalid("no table name")
	}
	if len(id) > 2 {
		return "", fence.Invalid("table name %q has %d parts; want table or schema.table", strings.Join(id, "."), len(id))
	}
	for _, part := range id {
		if err := identPart(part); err != nil {
			return "", err
		}
	}
	return id.Sanitize(), nil
}

// identPart checks one part of an identifier. Sanitize quotes anything; this
// refuses what it would silently change or PostgreSQL would truncate.
func identPart(s string) error {
	switch {
	case s == "":
		return fence.Invalid("empty identifier")
	case strings.IndexByte(s, 0) >= 0:
		return fence.Invalid("identifier %q contains a NUL byte", s)
	case len(s) > 63:
		return fence.Invalid("identifier %q is longer than PostgreSQL's 63 bytes", s)
	}
	return nil
}

// migrateLockKey is the advisory lock Migrate holds while it creates tables,
// so that two processes migrating at once do not collide in the catalog.
// It is "fencekit" in ASCII.
const migrateLockKey int64 = 0x66656e63656b6974

// MigrateSQL returns the statements Migrate runs for opts, for review or for
// your own migration tool.
func MigrateSQL(opts *Options) (string, error) {
	store, leases, err := opts.tables()
	if err != nil {
		return "", err
	}
	_, lo := opts.identifiers()
	queue, err := queueTable(lo)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d);
CREATE TABLE IF NOT EXISTS %s (
    key   text COLLATE "C" PRIMARY KEY,
    value bytea,
    fence bigint NOT NULL CHECK (fence >= 1)
);
CREATE TABLE IF NOT EXISTS %s (
    name       text COLLATE "C" PRIMARY KEY,
    owner      text,
    token      bigint NOT NULL CHECK (token >= 1),
    expires_at timestamptz,
    metadata   text
);
`, migrateLockKey, store, leases) + pgqueue.Table(queue) + ";\n" + permitDDL(lo) + upgradeSQL(leases), nil
}

// permitDDL creates the permit tables of the lease table leases, or
// nothing when its name leaves no room for theirs: single-name locks keep
// working there, and the permit calls say why they cannot.
func permitDDL(leases pgx.Identifier) string {
	pt, err := newPermitTables(leases)
	if err != nil {
		return ""
	}
	return pt.ddl()
}

// Migrate creates the store and lease tables, the lease table's queue table
// and its permit tables (of semaphores and read-write locks) if they do not
// exist, and adds the columns that later versions need (the lease table's
// metadata) to tables that an earlier version created; it leaves out that
// ALTER TABLE when the columns are there, so that migrating a current
// schema takes no table lock. It is idempotent and safe to run from
// several processes at once: the statements run as one transaction under an
// advisory transaction lock (one multi-statement query; inside a pgx.Tx, as
// part of it). A schema named in Options must already exist.
//
// Options whose two names denote one table (equal names, or a qualified and
// an unqualified name that resolve to the same table through the
// search_path) are refused with an error matching fence.ErrInvalid, and
// nothing is created.
func Migrate(ctx context.Context, db DB, opts *Options) error {
	if db == nil {
		return fence.Invalid("postgres: nil DB")
	}
	sql, err := MigrateSQL(opts)
	if err != nil {
		return err
	}
	if err := checkDistinctTables(ctx, db, opts); err != nil {
		return err
	}
	if sql, err = skipCurrentUpgrades(ctx, db, opts, sql); err != nil {
		return err
	}
	// Without arguments pgx sends the simple query protocol, in which
	// several statements run as one implicit transaction.
	if _, err := db.Exec(ctx, sql); err != nil {
		return wrapErr("migrate", err)
	}
	return nil
}

// checkDistinctTables refuses two table names that denote one table on the
// server: both exist and are the same relation, or both would be created
// in the same schema under the same name (an unqualified name is created
// in current_schema()). The names are parameters.
func checkDistinctTables(ctx context.Context, db DB, opts *Options) error {
	so, lo := opts.identifiers()
	split := func(id pgx.Identifier) (schema *string, table string) {
		if len(id) == 2 {
			return &id[0], id[1]
		}
		return nil, id[0]
	}
	ss, st := split(so)
	ls, lt := split(lo)
	var same bool
	err := db.QueryRow(ctx, `SELECT coalesce(to_regclass($1) = to_regclass($2), false)
    OR coalesce(coalesce($3::text, current_schema()) = coalesce($4::text, current_schema()) AND $5::text = $6::text, false)`,
		so.Sanitize(), lo.Sanitize(), ss, ls, st, lt).Scan(&same)
	switch {
	case err != nil:
		return wrapErr("migrate: compare table names", err)
	case same:
		return sameTable(so.Sanitize() + " and " + lo.Sanitize())
	}
	return nil
}

// ErrConflict matches a *ConflictError: PostgreSQL aborted the transaction
// because of a concurrent change (serialization failure, SQLSTATE 40001) or
// a deadlock (40P01). Nothing of the transaction was applied; roll it back
// and retry it from the start.
var ErrConflict = errors.New("postgres: transaction conflict; roll back and retry")

// ConflictError reports a serialization failure or deadlock. It matches
// ErrConflict, and errors.As still finds the underlying *pgconn.PgError.
type ConflictError struct {
	Op  string // the operation that failed, such as "put" or "guard check"
	Err error  // the driver's error, wrapping a *pgconn.PgError
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("postgres: %s: transaction conflict (roll back and retry): %v", e.Op, e.Err)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Unwrap returns the driver's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// SQLSTATE codes that mean "retry the transaction".
const (
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// wrapErr wraps a database error for op and classifies it (see transient):
// serialization failures and deadlocks become a *ConflictError, failures
// that a retry may cure are marked with driver.Transient, and everything else
// stays permanent, so that lock.Client.Acquire fails fast on it. The
// driver's error is always kept for errors.As.
func wrapErr(op string, err error) error {
	var wrapped error
	var pgErr *pgconn.PgError
	hasPgErr := errors.As(err, &pgErr)
	if hasPgErr && (pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected) {
		wrapped = &ConflictError{Op: op, Err: err}
	} else {
		wrapped = fmt.Errorf("postgres: %s: %w", op, err)
	}
	switch {
	case transient(err):
		return driver.Transient(wrapped)
	case hasPgErr && driver.Retryable(wrapped):
		// The server refused (a failed login, say), and pgx joined that
		// refusal with a network error from another host of the connection
		// string. The refusal decides: hide the rest from errors.As, so
		// that driver.Retryable does not take it for a network failure.
		return &permanentError{msg: wrapped.Error(), cause: pgErr}
	}
	return wrapped
}

// transient reports whether a retry of the same call may cure err: a
// server reply whose SQLSTATE says so (see transientCode), a timeout, or a
// connection that pgx knows broke or was never used.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server answered: its code decides, even when pgx joined the
		// answer with other hosts' network errors.
		return transientCode(pgErr.Code)
	}
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed)
}

// transientCode reports whether a SQLSTATE means "try again later": the
// connection failed (class 08), the transaction lost a conflict (40001,
// 40P01), the server is short of resources (class 53: too many connections,
// out of memory or disk), shutting down or starting up (57P01, 57P02,
// 57P03), a lock or statement timeout ended the statement (55P03, 57014).
// Everything else (an undefined table 42P01, a failed login 28P01 or 28000,
// a missing database 3D000, a missing privilege 42501, bad data) is
// permanent: the same call fails the same way.
func transientCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case codeSerializationFailure, codeDeadlockDetected,
		"57P01", "57P02", "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
		"55P03", // lock_not_available (lock_timeout, NOWAIT)
		"57014": // query_canceled (statement_timeout)
		return true
	}
	return false
}

// permanentError is a server's refusal that pgx reported together with
// other hosts' network errors. Its message keeps them all; Unwrap gives
// only the server's *pgconn.PgError.
type permanentError struct {
	msg   string
	cause *pgconn.PgError
}

func (e *permanentError) Error() string { return e.msg }
func (e *permanentError) Unwrap() error { return e.cause }
