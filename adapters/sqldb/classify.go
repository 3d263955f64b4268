package sqldb

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/fence"
)

// ErrNotMigrated matches a *NotMigratedError: a table or column that the
// call needs does not exist on the server. It is permanent: lock.Client
// does not retry it.
var ErrNotMigrated = errors.New("sqldb: table or column missing")

// NotMigratedError reports a statement refused because its table (or a
// column of it) does not exist: the server's error 1146 or 1054 on MySQL,
// SQLSTATE 42P01, 42703 or 3F000 on PostgreSQL. It matches ErrNotMigrated,
// and errors.As still finds the driver's error.
type NotMigratedError struct {
	Op    string // the operation that failed, such as "put" or "acquire"
	Table string // the table, quoted as in the statement
	Fix   string // what to do, such as "run sqldb.Migrate for it"
	Err   error  // the driver's error
}

// Error says which table is missing and what to do.
func (e *NotMigratedError) Error() string {
	return fmt.Sprintf("sqldb: %s: table %s or one of its columns does not exist (%s): %v", e.Op, e.Table, e.Fix, e.Err)
}

// Is makes errors.Is(err, ErrNotMigrated) true.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Unwrap returns the driver's error.
func (e *NotMigratedError) Unwrap() error { return e.Err }

// Fixes for a missing table, by who creates it.
const (
	fixMigrate = "run sqldb.Migrate with the same Dialect and Options, or the statements of sqldb.MigrateSQL"
	fixOwnRow  = "UpdateFenced's table is your own: create it, and add the fence column, e.g. ALTER TABLE t ADD COLUMN fence BIGINT NULL"
)

// missingCode reports whether a server code means "no such table, schema
// or column".
func missingCode(code string, mysql bool) bool {
	if mysql {
		switch code {
		case "1146", "1054", "1049": // no such table, column, database
			return true
		}
		return false
	}
	switch code {
	case "42P01", "42703", "3F000": // undefined table, column, schema
		return true
	}
	return false
}

// serverDialect names the server that sent err, from the type of the
// driver's error: go-sql-driver/mysql's *MySQLError is MySQL, an error with
// a SQLState method (pgx, lib/pq) is PostgreSQL. Zero when err carries no
// server reply.
func serverDialect(err error) Dialect {
	code, mysql := serverCode(err)
	switch {
	case code == "":
		return 0
	case mysql:
		return MySQL
	}
	return PostgreSQL
}

// classify wraps err, from a statement in dialect d on table for op, and
// says what it means: a reply from a server of the other dialect is
// fence.ErrInvalid naming the right Dialect; a missing table or column is a
// *NotMigratedError with fix; anything else goes through wrapErr. When
// ctx has ended, the result matches ctx's error too, whatever the driver
// made of the cancellation (lib/pq reports SQLSTATE 57014, "canceling
// statement due to user request").
func classify(ctx context.Context, d Dialect, table, fix, op string, err error) error {
	if err == nil {
		return nil
	}
	var out error
	code, mysql := serverCode(err)
	switch server := serverDialect(err); {
	case server != 0 && server != d:
		out = fmt.Errorf("%w: sqldb: %s: the server is %s, but the Dialect is %s; use sqldb.%s: %w", fence.ErrInvalid, op, server, d, server, err)
	case code != "" && missingCode(code, mysql) && table != "":
		out = &NotMigratedError{Op: op, Table: table, Fix: fix, Err: err}
	default:
		out = wrapErr(op, err)
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(out, cerr) {
		out = fmt.Errorf("%w: %w", out, cerr)
	}
	return out
}
