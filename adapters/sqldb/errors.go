package sqldb

import (
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/fencekit/fencekit/lock/driver"
)

// ErrConflict matches a *ConflictError: the server ended a statement
// because of a concurrent transaction. On MySQL and MariaDB that is a
// deadlock (error 1213, after which InnoDB has rolled back the whole
// transaction) or a lock wait timeout (error 1205, after which only the
// statement was undone); on PostgreSQL a serialization failure (SQLSTATE
// 40001) or a deadlock (40P01). Roll the transaction back and retry it from
// the start: a transaction that carries on after a conflict has lost the
// fence its Guard.Check raised, and on MySQL its next statements may run
// outside any transaction.
var ErrConflict = errors.New("sqldb: transaction conflict; roll back and retry")

// ConflictError reports a deadlock, lock wait timeout or serialization
// failure. It matches ErrConflict, and errors.As still finds the driver's
// error.
type ConflictError struct {
	Op  string // the operation that failed, such as "put" or "guard check"
	Err error  // the driver's error
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("sqldb: %s: transaction conflict (roll back and retry): %v", e.Op, e.Err)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Unwrap returns the driver's error.
func (e *ConflictError) Unwrap() error { return e.Err }

// MySQL error numbers this package acts on.
const (
	mysqlLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	mysqlDeadlock        = 1213 // ER_LOCK_DEADLOCK
)

// serverCode returns the code of the server's reply in err's chain: the
// MySQL error number (as decimal text) or the PostgreSQL SQLSTATE. The
// package imports no driver, so it reads them without naming the drivers'
// types: pgx's *pgconn.PgError (and lib/pq's error) have a SQLState
// method; go-sql-driver/mysql's *MySQLError has a Number field, read by
// reflection (TestServerCodeFromDrivers checks both against the real
// drivers).
func serverCode(err error) (code string, mysql bool) {
	var found string
	var isMySQL bool
	walk(err, func(e error) bool {
		if n, ok := mysqlNumber(e); ok {
			found, isMySQL = fmt.Sprint(n), true
			return true
		}
		if s, ok := e.(interface{ SQLState() string }); ok {
			found = s.SQLState()
			return true
		}
		return false
	})
	return found, isMySQL
}

// mysqlNumber reads the Number field of a *MySQLError.
func mysqlNumber(e error) (uint64, bool) {
	v := reflect.ValueOf(e)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	if v.Elem().Type().Name() != "MySQLError" {
		return 0, false
	}
	f := v.Elem().FieldByName("Number")
	if !f.IsValid() {
		return 0, false
	}
	switch f.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return f.Uint(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return uint64(f.Int()), true
	}
	return 0, false
}

// walk calls f on err and every error it wraps (Unwrap() error and
// Unwrap() []error), depth first, until f returns true.
func walk(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	if f(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return walk(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if walk(e, f) {
				return true
			}
		}
	}
	return false
}

// conflictCode reports whether a server code means "the transaction lost
// a conflict".
func conflictCode(code string, mysql bool) bool {
	if mysql {
		return code == fmt.Sprint(mysqlDeadlock) || code == fmt.Sprint(mysqlLockWaitTimeout)
	}
	return code == "40001" || code == "40P01"
}

// transientCode reports whether a server code means "try again later".
// MySQL: a conflict (1205, 1213), too many connections (1040), the server
// shutting down (1053), the connection killed (1927, MariaDB), a
// disconnect for inactivity (4031, MySQL 8). PostgreSQL: the classes and
// codes that adapters/postgres retries. Everything else (a missing table,
// a failed login, bad data) is permanent.
func transientCode(code string, mysql bool) bool {
	if mysql {
		switch code {
		case "1205", "1213", "1040", "1053", "1927", "4031":
			return true
		}
		return false
	}
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case "40001", "40P01", "57P01", "57P02", "57P03", "55P03", "57014":
		return true
	}
	return false
}

// brokenConn reports whether err says the connection broke under the call:
// database/sql/driver's ErrBadConn, or go-sql-driver/mysql's "invalid
// connection", which it returns (its network error only logged) when a
// read or write on the connection failed.
func brokenConn(err error) bool {
	return walk(err, func(e error) bool {
		return e == sqldriver.ErrBadConn || e.Error() == "invalid connection"
	})
}

// wrapErr wraps a database error for op and classifies it: conflicts
// become a *ConflictError; failures that a retry may cure (see
// transientCode, brokenConn, driver.Retryable) are marked with
// driver.Transient, so that lock.Client retries them; everything else stays
// permanent. The driver's error is kept for errors.As. A context error is
// returned as it is.
func wrapErr(op string, err error) error {
	code, mysql := serverCode(err)
	var wrapped error
	if code != "" && conflictCode(code, mysql) {
		wrapped = &ConflictError{Op: op, Err: err}
	} else {
		wrapped = fmt.Errorf("sqldb: %s: %w", op, err)
	}
	switch {
	case code != "":
		if transientCode(code, mysql) {
			return driver.Transient(wrapped)
		}
		return wrapped
	case brokenConn(err) || driver.Retryable(err):
		return driver.Transient(wrapped)
	}
	return wrapped
}

// isConflict reports whether err is a conflict that undid a whole
// autocommit statement, so that running it again is exact.
func isConflict(err error) bool {
	code, mysql := serverCode(err)
	return code != "" && conflictCode(code, mysql)
}
