package sqldb

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fence"
)

// Dialect chooses the SQL that Store, Guard, UpdateFenced, Backend and
// Migrate send: the server behind the *sql.DB or *sql.Tx, whatever driver
// talks to it. The zero Dialect is invalid, and every call with it fails
// with an error matching fence.ErrInvalid.
type Dialect int

const (
	// MySQL is MySQL 8 and MariaDB 10.11 or later, InnoDB tables, through
	// a driver such as github.com/go-sql-driver/mysql: ? placeholders,
	// identifiers quoted with backticks.
	MySQL Dialect = iota + 1
	// PostgreSQL is PostgreSQL through a database/sql driver such as
	// github.com/jackc/pgx/v5/stdlib: $n placeholders, identifiers quoted
	// with double quotes, the statements of package
	// github.com/fencekit/fencekit/adapters/postgres.
	PostgreSQL
)

// String names the dialect.
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "MySQL"
	case PostgreSQL:
		return "PostgreSQL"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// valid returns an error matching fence.ErrInvalid for an unknown dialect.
func (d Dialect) valid() error {
	if d != MySQL && d != PostgreSQL {
		return fence.Invalid("sqldb: unknown dialect %d; use sqldb.MySQL or sqldb.PostgreSQL", int(d))
	}
	return nil
}

// Identifier is a table name: one part (the table, found through the
// connection's current database or search_path) or two (database or
// schema, then table). Each part is quoted as an identifier, never spliced
// in raw.
type Identifier []string

// quote returns id quoted for d, or an error matching fence.ErrInvalid.
func (d Dialect) quote(id Identifier) (string, error) {
	if len(id) == 0 {
		return "", fence.Invalid("sqldb: no table name")
	}
	if len(id) > 2 {
		return "", fence.Invalid("sqldb: table name %q has %d parts; want table or schema.table", strings.Join(id, "."), len(id))
	}
	parts := make([]string, len(id))
	for i, p := range id {
		q, err := d.quotePart(p)
		if err != nil {
			return "", err
		}
		parts[i] = q
	}
	return strings.Join(parts, "."), nil
}

// quotePart checks and quotes one part of an identifier: a column or a
// table. Quoting escapes anything; the checks refuse what the server would
// reject or silently change (truncation, a trailing space in MySQL).
func (d Dialect) quotePart(s string) (string, error) {
	switch {
	case s == "":
		return "", fence.Invalid("sqldb: empty identifier")
	case !utf8.ValidString(s):
		return "", fence.Invalid("sqldb: identifier %q is not valid UTF-8", s)
	case strings.IndexByte(s, 0) >= 0:
		return "", fence.Invalid("sqldb: identifier %q contains a NUL byte", s)
	}
	switch d {
	case MySQL:
		// MySQL: at most 64 characters, only the Basic Multilingual
		// Plane, no trailing ASCII whitespace (MariaDB 10.11 refuses a
		// name ending in a space, tab, newline, CR, VT or FF with error
		// 1103; TestMySQLRefusesWhatTheServerRefuses).
		if n := utf8.RuneCountInString(s); n > 64 {
			return "", fence.Invalid("sqldb: identifier %q is longer than MySQL's 64 characters", s)
		}
		for _, r := range s {
			if r > 0xFFFF {
				return "", fence.Invalid("sqldb: identifier %q has a character outside the Basic Multilingual Plane, which MySQL refuses", s)
			}
		}
		if strings.TrimRight(s, " \t\n\v\f\r") != s {
			return "", fence.Invalid("sqldb: identifier %q ends with whitespace, which MySQL refuses", s)
		}
		return "`" + strings.ReplaceAll(s, "`", "``") + "`", nil
	case PostgreSQL:
		if len(s) > 63 {
			return "", fence.Invalid("sqldb: identifier %q is longer than PostgreSQL's 63 bytes", s)
		}
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`, nil
	}
	return "", d.valid()
}

// params numbers the bound parameters of one statement: ? for MySQL, $n
// for PostgreSQL.
type params struct {
	d    Dialect
	args []any
}

func (p *params) add(v any) string {
	p.args = append(p.args, v)
	if p.d == PostgreSQL {
		return fmt.Sprintf("$%d", len(p.args))
	}
	return "?"
}
