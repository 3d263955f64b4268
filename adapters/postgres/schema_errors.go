package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated matches a *NotMigratedError: a table, schema or column
// that the call needs does not exist. It is permanent: lock.Client does not
// retry it.
var ErrNotMigrated = errors.New("postgres: table or column missing")

// NotMigratedError reports a statement refused because its table (or its
// schema, or a column) does not exist: SQLSTATE 42P01, 3F000 or 42703. It
// matches ErrNotMigrated, and errors.As still finds the *pgconn.PgError.
type NotMigratedError struct {
	Op    string // the operation that failed, such as "put" or "acquire"
	Table string // the table, as quoted in the statement
	Fix   string // what to do, such as "run postgres.Migrate"
	Err   error  // the driver's error
}

// Error says which table is missing and what to do.
func (e *NotMigratedError) Error() string {
	return fmt.Sprintf("postgres: %s: table %s or one of its columns does not exist (%s): %v", e.Op, e.Table, e.Fix, e.Err)
}

// Is makes errors.Is(err, ErrNotMigrated) true.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Unwrap returns the driver's error.
func (e *NotMigratedError) Unwrap() error { return e.Err }

// Fixes for a missing table, by who creates it.
const (
	fixMigrate = "run postgres.Migrate with the same Options, or the statements of postgres.MigrateSQL"
	fixOwnRow  = "UpdateFenced's table is your own: create it, and add the fence column, e.g. ALTER TABLE t ADD COLUMN fence bigint"
)

// wrapTableErr is wrapErr for a statement on table: a missing table,
// schema or column becomes a *NotMigratedError that says fix.
func wrapTableErr(table, fix, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "3F000", "42703": // undefined table, schema, column
			return &NotMigratedError{Op: op, Table: table, Fix: fix, Err: err}
		}
	}
	return wrapErr(op, err)
}
