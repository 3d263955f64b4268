// Package sqldb keeps fencekit's locks and fenced data in MySQL, MariaDB
// or PostgreSQL over database/sql, for programs whose data access goes
// through it: GORM, sqlx, ent, sqlc, or database/sql itself.
//
// It imports database/sql and no driver: bring your own
// (github.com/go-sql-driver/mysql, github.com/jackc/pgx/v5/stdlib) and
// name the server with a Dialect, MySQL (MySQL 8, MariaDB 10.11 or later,
// InnoDB) or PostgreSQL. The semantics are those of adapters/postgres:
//
//   - Store is a fence.Store on a table (key, value, fence). It takes a
//     *sql.DB; every write is one statement that compares the token with
//     the row's fence and writes in the same step.
//   - Guard fences the caller's own transaction, a *sql.Tx (the one GORM,
//     sqlx and ent hand out): Check raises a resource's fence inside the
//     transaction and holds the row lock until commit, or reports a stale
//     token so that the caller rolls back. TxOf finds the *sql.Tx inside
//     a wrapper (GORM's with PrepareStmt, sqlx's).
//   - UpdateFenced is the version-column recipe on a *sql.Tx: one fenced
//     UPDATE of one of the caller's rows. For a read-modify-write, raise
//     the fence first (UpdateFenced with nothing to set, or Guard.Check),
//     then read, then write: see docs/sqldb.md.
//   - Backend is a lock backend (a driver.Backend, for lock.New) on a
//     lease table. It takes a *sql.DB, never a transaction. Expiry is
//     decided by the database clock, and each lock's token lives in its
//     row, so tokens keep rising across releases, expiries and server
//     restarts. It serves every shape of the driver contract: queued
//     waiting on a queue table next to the lease table, where waiters take
//     their turns in arrival order, re-checking since database/sql has no
//     wake-up (see Backend.Await); sets of locks in one transaction; and
//     semaphores and read-write locks on two permit tables of their own,
//     each acquire one transaction that locks the name's row first (see
//     Backend.Acquire).
//
// Create the tables with Migrate, or with the statements of MigrateSQL.
//
// On MySQL, keys, lock names and owners are VARBINARY: byte-exact, whatever
// the server's collation. Every MySQL statement learns its outcome from
// LAST_INSERT_ID(expr), which the server returns in its reply, and never
// from the affected-rows count, so the driver's CLIENT_FOUND_ROWS setting
// does not matter (UpdateFenced, which locks the row first, uses none, and
// keeps the caller's LAST_INSERT_ID()). Under InnoDB's default REPEATABLE
// READ the fenced statements read and lock the newest committed row (a
// locking read), as under READ COMMITTED, and one fenced row never
// deadlocks with itself: UpdateFenced takes the row's exclusive lock
// before anything else, and Guard.Check lets one transaction at a time
// wait for a resource's row (see Guard.Check). Deadlocks (1213) and lock wait timeouts (1205), and
// PostgreSQL's serialization failures and deadlocks, come back as a
// *ConflictError matching ErrConflict, never as a silent success; Store
// and Backend, whose statements commit on their own, run such a statement
// again (three attempts) first.
//
// Driver errors that a retry may cure (a broken connection, a conflict, a
// server shutting down) are marked with driver.Transient, so that
// lock.Client retries them; all others (a failed login, bad data) are
// permanent and fail fast. A missing table or column is a
// *NotMigratedError (ErrNotMigrated) that names the table; a Dialect that
// does not match the server is fence.ErrInvalid naming the right one; an
// error after the caller's context ended matches the context's error.
//
// Table and column names are quoted as identifiers (backticks for MySQL,
// double quotes for PostgreSQL) after checks that refuse what the server
// would reject or change; every value is a bound parameter. Bad input gets
// an error matching fence.ErrInvalid before anything is sent (a Backend's
// requests are checked by the lock.Client that sends them).
package sqldb
